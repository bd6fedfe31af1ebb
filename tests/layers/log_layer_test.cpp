// SPDX-License-Identifier: Apache-2.0
#include "layers/log_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

std::string LogText(float base, float scale, float shift) {
  return fmt::format("name: 'log' type: 'Log' log_param {{ base: {} scale: {} shift: {} }}", base,
                     scale, shift);
}

TEST(LogLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'log' type: 'Log'"), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(LogLayerTest, NaturalBaseByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'log' type: 'Log'"), &ctx);  // base -1 means e
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {1.0f, std::exp(1.0f), 0.25f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // ln 1 = 0, ln e = 1, ln 1/4 = -2 ln 2
  const std::vector<float> expected = {0.0f, 1.0f, -2.0f * std::log(2.0f)};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
  std::fill_n(top.mutable_cpu_diff(), 3, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // 1 / x = 1, 1/e, 4
  const std::vector<float> expected_diff = {1.0f, std::exp(-1.0f), 4.0f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(bottom.cpu_diff()[i], expected_diff[i], 1e-6f) << i;
}

TEST(LogLayerTest, BaseScaleShiftByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LogText(2, 2, 1)), &ctx);
  Tensor bottom({2}), top;
  testing::SetData(&bottom, {0.5f, 1.5f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // log2(1 + 2x) = log2 2, log2 4 = 1, 2
  EXPECT_NEAR(top.cpu_data()[0], 1.0f, 1e-6f);
  EXPECT_NEAR(top.cpu_data()[1], 2.0f, 1e-6f);
  std::fill_n(top.mutable_cpu_diff(), 2, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // 2 / (ln 2 (1 + 2x)) = 1 / ln 2, 1 / (2 ln 2)
  EXPECT_NEAR(bottom.cpu_diff()[0], 1.0f / std::log(2.0f), 1e-5f);
  EXPECT_NEAR(bottom.cpu_diff()[1], 0.5f / std::log(2.0f), 1e-5f);
}

struct LogCase {
  float base, scale, shift;
};

// Names the case in failure messages.
void PrintTo(const LogCase& c, std::ostream* os) {
  *os << "base " << c.base << " "
      << "scale " << c.scale << " "
      << "shift " << c.shift;
}

class LogCaseTest : public ::testing::TestWithParam<LogCase> {};

// Inputs in [0.5, 2] keep shift + scale * x > 0.3 for every case below.
TEST_P(LogCaseTest, GradientMatchesNumeric) {
  const LogCase c = GetParam();
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LogText(c.base, c.scale, c.shift)), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillUniform(&bottom, 0.5f, 2.0f);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST_P(LogCaseTest, InPlaceMatchesSeparateTop) {
  const LogCase c = GetParam();
  Tensor input({2, 3, 4});
  testing::FillUniform(&input, 0.5f, 2.0f);
  testing::ExpectInPlaceMatches(LogText(c.base, c.scale, c.shift), input);
}

INSTANTIATE_TEST_SUITE_P(Cases, LogCaseTest,
                         ::testing::Values(LogCase{-1, 1, 0}, LogCase{-1, 0.5f, 1.2f},
                                           LogCase{2, 1, 0}, LogCase{2, 0.7f, 0.5f},
                                           LogCase{0.5f, 1.1f, 0.3f}));

TEST(LogLayerTest, BadBaseIsAnError) {
  for (float base : {0.0f, -3.0f, 1.0f}) {
    Context ctx(Device::Cpu(), 1701);
    auto layer = CreateLayer(LayerParam(LogText(base, 1, 0)), &ctx);
    Tensor bottom({3}), top;
    try {
      layer->Initialize({&bottom}, {&top});
      ADD_FAILURE() << "no error for base " << base;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("base"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cortado
