// SPDX-License-Identifier: Apache-2.0
#include "layers/relu_layer.hpp"

#include <gtest/gtest.h>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

TEST(ReLULayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'relu' type: 'ReLU'"), &ctx);
  Tensor bottom({2, 3, 4, 5}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
  EXPECT_STREQ(layer->type(), "ReLU");
}

TEST(ReLULayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'relu' type: 'ReLU'"), &ctx);
  Tensor bottom({5}), top;
  testing::SetData(&bottom, {-2.0f, -0.5f, 0.0f, 0.5f, 3.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // max(x, 0)
  EXPECT_EQ(Data(top), (std::vector<float>{0.0f, 0.0f, 0.0f, 0.5f, 3.0f}));
  std::fill_n(top.mutable_cpu_diff(), 5, 2.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // dy where x > 0, else 0 (also at x == 0)
  EXPECT_EQ(Diff(bottom), (std::vector<float>{0.0f, 0.0f, 0.0f, 2.0f, 2.0f}));
}

TEST(ReLULayerTest, LeakyForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer =
      CreateLayer(LayerParam("name: 'relu' type: 'ReLU' relu_param { negative_slope: 0.1 }"), &ctx);
  Tensor bottom({5}), top;
  testing::SetData(&bottom, {-2.0f, -0.5f, 0.0f, 0.5f, 3.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // x for x > 0, 0.1 x otherwise
  const std::vector<float> expected = {-0.2f, -0.05f, 0.0f, 0.5f, 3.0f};
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(top.cpu_data()[i], expected[i]);
  std::fill_n(top.mutable_cpu_diff(), 5, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // 1 for x > 0, the slope 0.1 for x <= 0 (Caffe takes the slope at 0)
  const std::vector<float> expected_diff = {0.1f, 0.1f, 0.1f, 1.0f, 1.0f};
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(bottom.cpu_diff()[i], expected_diff[i]);
}

TEST(ReLULayerTest, NoPropagateDownLeavesBottomDiff) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'relu' type: 'ReLU'"), &ctx);
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {1.0f, -1.0f, 2.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  std::fill_n(bottom.mutable_cpu_diff(), 3, 7.0f);
  std::fill_n(top.mutable_cpu_diff(), 3, 1.0f);
  layer->Backward({&top}, {false}, {&bottom});
  EXPECT_EQ(Diff(bottom), (std::vector<float>{7.0f, 7.0f, 7.0f}));
}

class ReLUSlopeTest : public ::testing::TestWithParam<float> {};

TEST_P(ReLUSlopeTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer =
      CreateLayer(LayerParam(fmt::format(
                      "name: 'relu' type: 'ReLU' relu_param {{ negative_slope: {} }}", GetParam())),
                  &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom);
  testing::GradientCheckOptions options;
  options.kink = 0.0f;
  options.kink_range = 0.011f;  // more than the step, so no difference straddles 0
  testing::GradientChecker(options).Check(layer.get(), {&bottom}, {&top});
}

TEST_P(ReLUSlopeTest, InPlaceMatchesSeparateTop) {
  Tensor input({2, 3, 4});
  testing::FillGaussian(&input);
  testing::ExpectInPlaceMatches(
      fmt::format("name: 'relu' type: 'ReLU' relu_param {{ negative_slope: {} }}", GetParam()),
      input);
}

// Plain, leaky, and a negative slope (where in place needs the saved input).
INSTANTIATE_TEST_SUITE_P(Slopes, ReLUSlopeTest, ::testing::Values(0.0f, 0.01f, -0.5f));

}  // namespace
}  // namespace cortado
