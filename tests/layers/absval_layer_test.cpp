// SPDX-License-Identifier: Apache-2.0
#include "layers/absval_layer.hpp"

#include <gtest/gtest.h>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

constexpr const char* kLayer = "name: 'abs' type: 'AbsVal'";

TEST(AbsValLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kLayer), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(AbsValLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kLayer), &ctx);
  Tensor bottom({4}), top;
  testing::SetData(&bottom, {-3.0f, 0.0f, 2.0f, -0.5f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{3.0f, 0.0f, 2.0f, 0.5f}));
  testing::SetData(&top, {1.0f, 1.0f, 1.0f, 1.0f});  // Backward must read x, not |x|
  std::fill_n(top.mutable_cpu_diff(), 4, 3.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // dy * sign(x), with sign(0) = 0
  EXPECT_EQ(Diff(bottom), (std::vector<float>{-3.0f, 0.0f, 3.0f, -3.0f}));
}

TEST(AbsValLayerTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kLayer), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom);
  testing::GradientCheckOptions options;
  options.kink = 0.0f;
  options.kink_range = 0.011f;
  testing::GradientChecker(options).Check(layer.get(), {&bottom}, {&top});
}

TEST(AbsValLayerTest, InPlaceMatchesSeparateTop) {
  // Caffe refuses AbsVal in place; Cortado keeps the input to get the sign back.
  Tensor input({2, 3, 4});
  testing::FillGaussian(&input);
  testing::ExpectInPlaceMatches(kLayer, input);
}

}  // namespace
}  // namespace cortado
