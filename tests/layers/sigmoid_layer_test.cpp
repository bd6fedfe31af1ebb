// SPDX-License-Identifier: Apache-2.0
#include "layers/sigmoid_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

constexpr const char* kLayer = "name: 'sig' type: 'Sigmoid'";

TEST(SigmoidLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kLayer), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(SigmoidLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kLayer), &ctx);
  Tensor bottom({4}), top;
  // 1 / (1 + e^-x): x = 0 -> 1/2; x = ln 3 -> 1/(1 + 1/3) = 3/4; x = -ln 3 -> 1/4; x = 40 -> 1
  testing::SetData(&bottom, {0.0f, std::log(3.0f), -std::log(3.0f), 40.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  const std::vector<float> expected = {0.5f, 0.75f, 0.25f, 1.0f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
  std::fill_n(top.mutable_cpu_diff(), 4, 2.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // 2 * y (1 - y): 2 * 1/4, 2 * 3/16, 2 * 3/16, 0
  const std::vector<float> expected_diff = {0.5f, 0.375f, 0.375f, 0.0f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(bottom.cpu_diff()[i], expected_diff[i], 1e-6f) << i;
}

TEST(SigmoidLayerTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kLayer), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom, 0.0f, 2.0f);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST(SigmoidLayerTest, InPlaceMatchesSeparateTop) {
  Tensor input({2, 3, 4});
  testing::FillGaussian(&input, 0.0f, 2.0f);
  testing::ExpectInPlaceMatches(kLayer, input);
}

}  // namespace
}  // namespace cortado
