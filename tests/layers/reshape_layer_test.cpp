// SPDX-License-Identifier: Apache-2.0
#include "layers/reshape_layer.hpp"

#include <gtest/gtest.h>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::vector<int> ReshapeShape(const std::string& reshape_param, const std::vector<int>& shape) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in(shape), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'rs' type: 'Reshape' reshape_param { " + reshape_param + " }"),
      &ctx);
  layer->Initialize({&in}, {&top});
  return top.shape();
}

TEST(ReshapeLayerTest, Shapes) {
  const std::vector<int> in = {2, 3, 4, 5};
  EXPECT_EQ(ReshapeShape("shape { dim: 0 dim: -1 }", in), (std::vector<int>{2, 60}));
  EXPECT_EQ(ReshapeShape("shape { dim: 6 dim: 20 }", in), (std::vector<int>{6, 20}));
  EXPECT_EQ(ReshapeShape("shape { dim: -1 dim: 0 dim: 2 dim: 10 }", in),
            (std::vector<int>{2, 3, 2, 10}));
  // Replace axes [1, 3): 3 x 4 becomes 12.
  EXPECT_EQ(ReshapeShape("axis: 1 num_axes: 2 shape { dim: -1 }", in),
            (std::vector<int>{2, 12, 5}));
  // axis -1 inserts after the last axis; num_axes 0 replaces nothing.
  EXPECT_EQ(ReshapeShape("axis: -1 num_axes: 0 shape { dim: 1 }", in),
            (std::vector<int>{2, 3, 4, 5, 1}));
  EXPECT_EQ(ReshapeShape("axis: 0 num_axes: 0 shape { dim: 1 dim: 1 }", in),
            (std::vector<int>{1, 1, 2, 3, 4, 5}));
  // Copy (0) counts from `axis`.
  EXPECT_EQ(ReshapeShape("axis: 2 shape { dim: 0 dim: -1 }", in), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(ReshapeShape("shape { }", std::vector<int>{1}), (std::vector<int>{}));
}

TEST(ReshapeLayerTest, ForwardSharesData) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), top;
  for (int i = 0; i < 6; ++i) in.mutable_cpu_data()[i] = static_cast<float>(i);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'rs' type: 'Reshape' reshape_param { shape { dim: 3 dim: 2 } }"),
      &ctx);
  layer->Initialize({&in}, {&top});
  layer->Forward({&in}, {&top});
  // Row-major: [[0 1 2] [3 4 5]] read as 3 x 2 is [[0 1] [2 3] [4 5]].
  EXPECT_EQ(top.data_at(1, 0), 2.0f);
  EXPECT_EQ(top.data_at(2, 1), 5.0f);
  EXPECT_EQ(top.cpu_data(), in.cpu_data());
  EXPECT_EQ(top.cpu_diff(), in.cpu_diff());
}

TEST(ReshapeLayerTest, Gradient) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 2}), top;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'rs' type: 'Reshape' reshape_param { shape { dim: -1 dim: 4 } }"),
      &ctx);
  testing::GradientChecker().Check(layer.get(), {&in}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{3, 4}));
}

TEST(ReshapeLayerTest, CountMismatchIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4, 5}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'rs' type: 'Reshape' reshape_param { shape { dim: 7 dim: 8 } }"),
      &ctx);
  try {
    layer->Initialize({&in}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'rs'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("7 8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 4 5 (120)"), std::string::npos) << msg;
  }
}

TEST(ReshapeLayerTest, IndivisibleInferredDimIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4, 5}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'rs' type: 'Reshape' reshape_param { shape { dim: 7 dim: -1 } }"),
      &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&top}), Error);
}

TEST(ReshapeLayerTest, TwoInferredDimsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'rs' type: 'Reshape' reshape_param { shape { dim: -1 dim: -1 } }"),
      &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&top}), Error);
}

TEST(ReshapeLayerTest, CopyWithoutBottomAxisIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({6}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'rs' type: 'Reshape' reshape_param { shape { dim: 6 dim: 0 } }"),
      &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&top}), Error);
}

TEST(ReshapeLayerTest, AxisOutOfRangeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'rs' type: 'Reshape' reshape_param { axis: 3 shape { dim: 1 } }"),
      &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&top}), Error);
}

}  // namespace
}  // namespace cortado
