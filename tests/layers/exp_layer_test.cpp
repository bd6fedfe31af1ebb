// SPDX-License-Identifier: Apache-2.0
#include "layers/exp_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

std::string ExpText(float base, float scale, float shift) {
  return fmt::format("name: 'exp' type: 'Exp' exp_param {{ base: {} scale: {} shift: {} }}", base,
                     scale, shift);
}

TEST(ExpLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'exp' type: 'Exp'"), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(ExpLayerTest, NaturalBaseByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'exp' type: 'Exp'"), &ctx);  // base -1 means e
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {0.0f, 1.0f, -1.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  const std::vector<float> expected = {1.0f, std::exp(1.0f), std::exp(-1.0f)};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
  std::fill_n(top.mutable_cpu_diff(), 3, 2.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // d/dx e^x = e^x, times dy = 2
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(bottom.cpu_diff()[i], 2.0f * expected[i], 1e-5f) << i;
}

TEST(ExpLayerTest, BaseScaleShiftByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(ExpText(2, 2, 1)), &ctx);
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {0.0f, 0.5f, -1.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // 2^(1 + 2x) = 2, 4, 1/2
  const std::vector<float> expected = {2.0f, 4.0f, 0.5f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
  std::fill_n(top.mutable_cpu_diff(), 3, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // dy/dx = y * 2 ln 2
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(bottom.cpu_diff()[i], expected[i] * 2.0f * std::log(2.0f), 1e-5f) << i;
  }
}

struct ExpCase {
  float base, scale, shift;
};

// Names the case in failure messages.
void PrintTo(const ExpCase& c, std::ostream* os) {
  *os << "base " << c.base << " "
      << "scale " << c.scale << " "
      << "shift " << c.shift;
}

class ExpCaseTest : public ::testing::TestWithParam<ExpCase> {};

TEST_P(ExpCaseTest, GradientMatchesNumeric) {
  const ExpCase c = GetParam();
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(ExpText(c.base, c.scale, c.shift)), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST_P(ExpCaseTest, InPlaceMatchesSeparateTop) {
  const ExpCase c = GetParam();
  Tensor input({2, 3, 4});
  testing::FillGaussian(&input);
  testing::ExpectInPlaceMatches(ExpText(c.base, c.scale, c.shift), input);
}

INSTANTIATE_TEST_SUITE_P(Cases, ExpCaseTest,
                         ::testing::Values(ExpCase{-1, 1, 0}, ExpCase{-1, 0.5f, 1.2f},
                                           ExpCase{2, 1, 0}, ExpCase{2, -0.7f, 0.5f},
                                           ExpCase{0.5f, 1.1f, -0.3f}));

TEST(ExpLayerTest, NonPositiveBaseIsAnError) {
  for (float base : {0.0f, -2.0f}) {
    Context ctx(Device::Cpu(), 1701);
    auto layer = CreateLayer(LayerParam(ExpText(base, 1, 0)), &ctx);
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
