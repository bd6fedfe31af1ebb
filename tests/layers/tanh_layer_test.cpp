// SPDX-License-Identifier: Apache-2.0
#include "layers/tanh_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

constexpr const char* kLayer = "name: 'tanh' type: 'TanH'";

TEST(TanHLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kLayer), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(TanHLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kLayer), &ctx);
  Tensor bottom({3}), top;
  // tanh(ln 2) = (2 - 1/2) / (2 + 1/2) = 0.6
  testing::SetData(&bottom, {0.0f, std::log(2.0f), -std::log(2.0f)});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  const std::vector<float> expected = {0.0f, 0.6f, -0.6f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
  std::fill_n(top.mutable_cpu_diff(), 3, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // 1 - y^2: 1, 1 - 0.36, 1 - 0.36
  const std::vector<float> expected_diff = {1.0f, 0.64f, 0.64f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(bottom.cpu_diff()[i], expected_diff[i], 1e-6f) << i;
}

TEST(TanHLayerTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kLayer), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST(TanHLayerTest, InPlaceMatchesSeparateTop) {
  Tensor input({2, 3, 4});
  testing::FillGaussian(&input);
  testing::ExpectInPlaceMatches(kLayer, input);
}

}  // namespace
}  // namespace cortado
