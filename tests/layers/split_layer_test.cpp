// SPDX-License-Identifier: Apache-2.0
#include "layers/split_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

TEST(SplitLayerTest, ShapesAndSharedData) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4}), a, b;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'sp' type: 'Split'"), &ctx);
  layer->Initialize({&in}, {&a, &b});
  EXPECT_EQ(a.shape(), in.shape());
  EXPECT_EQ(b.shape(), in.shape());
  layer->Forward({&in}, {&a, &b});
  EXPECT_EQ(a.cpu_data(), in.cpu_data());
  EXPECT_EQ(b.cpu_data(), in.cpu_data());
  EXPECT_NE(a.cpu_diff(), in.cpu_diff());
}

TEST(SplitLayerTest, BackwardSumsTopDiffs) {
  Context ctx(Device::Cpu(), 1701);
  // Bottom diff = 1 + 10 + 100 times each position's value.
  Tensor in({2}), a, b, c;
  auto layer = CreateLayer(testing::LayerParam("name: 'sp' type: 'Split'"), &ctx);
  layer->Initialize({&in}, {&a, &b, &c});
  a.mutable_cpu_diff()[0] = 1;
  a.mutable_cpu_diff()[1] = 2;
  b.mutable_cpu_diff()[0] = 10;
  b.mutable_cpu_diff()[1] = 20;
  c.mutable_cpu_diff()[0] = 100;
  c.mutable_cpu_diff()[1] = 200;
  layer->Backward({&a, &b, &c}, {true}, {&in});
  EXPECT_EQ(in.cpu_diff()[0], 111.0f);
  EXPECT_EQ(in.cpu_diff()[1], 222.0f);
}

TEST(SplitLayerTest, Gradient) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 2}), a, b, c;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'sp' type: 'Split'"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&in}, {&a, &b, &c});
}

TEST(SplitLayerTest, GradientOneTop) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), a;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'sp' type: 'Split'"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&in}, {&a});
}

TEST(SplitLayerTest, InPlaceIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), a;
  auto layer = CreateLayer(testing::LayerParam("name: 'sp' type: 'Split'"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&a, &in}), Error);
}

TEST(SplitLayerTest, NoTopIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3});
  auto layer = CreateLayer(testing::LayerParam("name: 'sp' type: 'Split'"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {}), Error);
}

}  // namespace
}  // namespace cortado
