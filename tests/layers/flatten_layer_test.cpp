// SPDX-License-Identifier: Apache-2.0
#include "layers/flatten_layer.hpp"

#include <gtest/gtest.h>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::vector<int> FlattenShape(const std::string& flatten_param, const std::vector<int>& shape) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in(shape), top;
  auto layer =
      CreateLayer(testing::LayerParam("name: 'fl' type: 'Flatten' " + flatten_param), &ctx);
  layer->Initialize({&in}, {&top});
  return top.shape();
}

TEST(FlattenLayerTest, Shapes) {
  EXPECT_EQ(FlattenShape("", {2, 3, 4, 5}), (std::vector<int>{2, 60}));
  EXPECT_EQ(FlattenShape("flatten_param { axis: 1 end_axis: 2 }", {2, 3, 4, 5}),
            (std::vector<int>{2, 12, 5}));
  EXPECT_EQ(FlattenShape("flatten_param { axis: 0 }", {2, 3, 4, 5}), (std::vector<int>{120}));
  EXPECT_EQ(FlattenShape("flatten_param { axis: -2 }", {2, 3, 4, 5}), (std::vector<int>{2, 3, 20}));
  EXPECT_EQ(FlattenShape("flatten_param { axis: 2 end_axis: 2 }", {2, 3, 4, 5}),
            (std::vector<int>{2, 3, 4, 5}));
}

TEST(FlattenLayerTest, ForwardSharesDataAndDiff) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 2}), top;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'fl' type: 'Flatten'"), &ctx);
  layer->Initialize({&in}, {&top});
  layer->Forward({&in}, {&top});
  // Row-major order is unchanged, so top[i] is bottom[i] for every i.
  EXPECT_EQ(top.cpu_data(), in.cpu_data());
  EXPECT_EQ(top.cpu_diff(), in.cpu_diff());
  EXPECT_EQ(top.data_at(1, 4), in.data_at(1, 2, 0));
}

TEST(FlattenLayerTest, Gradient) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 2}), top;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'fl' type: 'Flatten'"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&in}, {&top});
}

TEST(FlattenLayerTest, EndAxisBeforeAxisIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4, 5}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'fl' type: 'Flatten' flatten_param { axis: 2 end_axis: 1 }"),
      &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&top}), Error);
}

TEST(FlattenLayerTest, AxisOutOfRangeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'fl' type: 'Flatten' flatten_param { axis: 4 }"), &ctx);
  try {
    layer->Initialize({&in}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'fl'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 (6)"), std::string::npos) << msg;
  }
}

TEST(FlattenLayerTest, InPlaceIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3});
  auto layer = CreateLayer(testing::LayerParam("name: 'fl' type: 'Flatten'"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&in}), Error);
}

}  // namespace
}  // namespace cortado
