// SPDX-License-Identifier: Apache-2.0
#include "layers/elu_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

std::string EluText(float alpha) {
  return fmt::format("name: 'elu' type: 'ELU' elu_param {{ alpha: {} }}", alpha);
}

TEST(ELULayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'elu' type: 'ELU'"), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(ELULayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(EluText(0.5f)), &ctx);
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {-std::log(2.0f), 0.0f, 1.5f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // x <= 0: 0.5 (e^x - 1): 0.5 (1/2 - 1) = -0.25 and 0; x > 0: x
  const std::vector<float> expected = {-0.25f, 0.0f, 1.5f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
  std::fill_n(top.mutable_cpu_diff(), 3, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // x <= 0: y + alpha = 0.25 and 0.5; x > 0: 1
  const std::vector<float> expected_diff = {0.25f, 0.5f, 1.0f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(bottom.cpu_diff()[i], expected_diff[i], 1e-6f) << i;
}

class ELUAlphaTest : public ::testing::TestWithParam<float> {};

TEST_P(ELUAlphaTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(EluText(GetParam())), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom);
  testing::GradientCheckOptions options;
  options.kink = 0.0f;  // the derivative jumps at 0 unless alpha is 1
  options.kink_range = 0.011f;
  testing::GradientChecker(options).Check(layer.get(), {&bottom}, {&top});
}

TEST_P(ELUAlphaTest, InPlaceMatchesSeparateTop) {
  Tensor input({2, 3, 4});
  testing::FillGaussian(&input);
  testing::ExpectInPlaceMatches(EluText(GetParam()), input);
}

// Default, smaller, and negative alpha (in place then keeps the input).
INSTANTIATE_TEST_SUITE_P(Alphas, ELUAlphaTest, ::testing::Values(1.0f, 0.5f, -0.5f));

}  // namespace
}  // namespace cortado
