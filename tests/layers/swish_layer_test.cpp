// SPDX-License-Identifier: Apache-2.0
#include "layers/swish_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

std::string SwishText(float beta) {
  return fmt::format("name: 'swish' type: 'Swish' swish_param {{ beta: {} }}", beta);
}

TEST(SwishLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'swish' type: 'Swish'"), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(SwishLayerTest, DefaultBetaIsOne) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'swish' type: 'Swish'"), &ctx);
  const float ln3 = std::log(3.0f);
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {0.0f, ln3, -ln3});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // x * sigmoid(x): sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4
  const std::vector<float> expected = {0.0f, 0.75f * ln3, -0.25f * ln3};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
}

TEST(SwishLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(SwishText(2.0f)), &ctx);
  const float ln3 = std::log(3.0f);
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {0.0f, 0.5f * ln3, -0.5f * ln3});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // sigmoid(2x) is 1/2, 3/4, 1/4
  const std::vector<float> expected = {0.0f, 0.375f * ln3, -0.125f * ln3};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
  std::fill_n(top.mutable_cpu_diff(), 3, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // d/dx x s(bx) = s + b x s (1 - s)
  const std::vector<float> expected_diff = {0.5f, 0.75f + 0.1875f * ln3, 0.25f - 0.1875f * ln3};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(bottom.cpu_diff()[i], expected_diff[i], 1e-6f) << i;
}

class SwishBetaTest : public ::testing::TestWithParam<float> {};

TEST_P(SwishBetaTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(SwishText(GetParam())), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom, 0.0f, 2.0f);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST_P(SwishBetaTest, InPlaceMatchesSeparateTop) {
  Tensor input({2, 3, 4});
  testing::FillGaussian(&input, 0.0f, 2.0f);
  testing::ExpectInPlaceMatches(SwishText(GetParam()), input);
}

INSTANTIATE_TEST_SUITE_P(Betas, SwishBetaTest, ::testing::Values(1.0f, 0.5f, 2.0f, -1.5f));

TEST(SwishLayerTest, TwoTopsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'swish' type: 'Swish'"), &ctx);
  Tensor bottom({3}), a, b;
  try {
    layer->Initialize({&bottom}, {&a, &b});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'swish' (Swish)"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace cortado
