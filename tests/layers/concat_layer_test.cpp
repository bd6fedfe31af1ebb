// SPDX-License-Identifier: Apache-2.0
#include "layers/concat_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(static_cast<int>(values.size()), t->count());
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

std::vector<float> Data(const Tensor& t) {
  return std::vector<float>(t.cpu_data(), t.cpu_data() + t.count());
}

TEST(ConcatLayerTest, Shapes) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3, 4, 5}), b({2, 5, 4, 5}), c({2, 1, 4, 5}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat'"), &ctx);
  layer->Initialize({&a, &b, &c}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 9, 4, 5}));

  Tensor d({3, 3, 4, 5}), top0;
  auto axis0 =
      CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat' concat_param { axis: 0 }"), &ctx);
  axis0->Initialize({&a, &d}, {&top0});
  EXPECT_EQ(top0.shape(), (std::vector<int>{5, 3, 4, 5}));

  Tensor e({2, 3, 4, 2}), top3;
  auto last = CreateLayer(
      testing::LayerParam("name: 'cat' type: 'Concat' concat_param { axis: -1 }"), &ctx);
  last->Initialize({&a, &e}, {&top3});
  EXPECT_EQ(top3.shape(), (std::vector<int>{2, 3, 4, 7}));

  Tensor top_legacy;
  auto legacy = CreateLayer(
      testing::LayerParam("name: 'cat' type: 'Concat' concat_param { concat_dim: 0 }"), &ctx);
  legacy->Initialize({&a, &d}, {&top_legacy});
  EXPECT_EQ(top_legacy.shape(), (std::vector<int>{5, 3, 4, 5}));
}

TEST(ConcatLayerTest, ForwardAxis1) {
  Context ctx(Device::Cpu(), 1701);
  // a = [[1 2] [3 4]], b = [[5] [6]]: joined along axis 1 row by row.
  Tensor a({2, 2}), b({2, 1}), top;
  SetData(&a, {1, 2, 3, 4});
  SetData(&b, {5, 6});
  auto layer = CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat'"), &ctx);
  layer->Initialize({&a, &b}, {&top});
  layer->Forward({&a, &b}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 3}));
  EXPECT_EQ(Data(top), (std::vector<float>{1, 2, 5, 3, 4, 6}));
}

TEST(ConcatLayerTest, ForwardAxis0AndBackward) {
  Context ctx(Device::Cpu(), 1701);
  // Along axis 0 the bottoms are stacked: [[1 2] [3 4] [7 8]].
  Tensor a({2, 2}), c({1, 2}), top;
  SetData(&a, {1, 2, 3, 4});
  SetData(&c, {7, 8});
  auto layer =
      CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat' concat_param { axis: 0 }"), &ctx);
  layer->Initialize({&a, &c}, {&top});
  layer->Forward({&a, &c}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{1, 2, 3, 4, 7, 8}));
  // Backward hands each bottom its rows of the top diff.
  std::vector<float> top_diff = {10, 20, 30, 40, 50, 60};
  std::copy(top_diff.begin(), top_diff.end(), top.mutable_cpu_diff());
  layer->Backward({&top}, {true, true}, {&a, &c});
  EXPECT_EQ(std::vector<float>(a.cpu_diff(), a.cpu_diff() + 4),
            (std::vector<float>{10, 20, 30, 40}));
  EXPECT_EQ(std::vector<float>(c.cpu_diff(), c.cpu_diff() + 2), (std::vector<float>{50, 60}));
}

TEST(ConcatLayerTest, SingleBottomSharesDataAndDiff) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat'"), &ctx);
  layer->Initialize({&a}, {&top});
  EXPECT_EQ(top.cpu_data(), a.cpu_data());
  EXPECT_EQ(top.cpu_diff(), a.cpu_diff());
}

TEST(ConcatLayerTest, GradientAxis1) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3, 2, 2}), b({2, 2, 2, 2}), top;
  testing::FillGaussian(&a, 0, 1, 1);
  testing::FillGaussian(&b, 0, 1, 2);
  auto layer = CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat'"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&a, &b}, {&top});
}

TEST(ConcatLayerTest, GradientAxis0) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3, 2}), b({1, 3, 2}), c({3, 3, 2}), top;
  testing::FillGaussian(&a, 0, 1, 1);
  testing::FillGaussian(&b, 0, 1, 2);
  testing::FillGaussian(&c, 0, 1, 3);
  auto layer =
      CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat' concat_param { axis: 0 }"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&a, &b, &c}, {&top});
}

TEST(ConcatLayerTest, GradientSingleBottom) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3}), top;
  testing::FillGaussian(&a, 0, 1, 1);
  auto layer = CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat'"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&a}, {&top});
}

TEST(ConcatLayerTest, MismatchedShapesNameLayerAndBothShapes) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3, 4, 5}), b({2, 3, 5, 5}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat'"), &ctx);
  try {
    layer->Initialize({&a, &b}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(msg.find("'cat'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 4 5 (120)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 5 5 (150)"), std::string::npos) << msg;
  }
}

TEST(ConcatLayerTest, DifferentNumberOfAxesIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3, 4}), b({2, 3}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat'"), &ctx);
  EXPECT_THROW(layer->Initialize({&a, &b}, {&top}), Error);
}

TEST(ConcatLayerTest, AxisAndConcatDimTogetherIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3}), b({2, 3}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'cat' type: 'Concat' concat_param { axis: 1 concat_dim: 1 }"),
      &ctx);
  EXPECT_THROW(layer->Initialize({&a, &b}, {&top}), Error);
}

TEST(ConcatLayerTest, AxisOutOfRangeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3}), b({2, 3}), top;
  auto layer =
      CreateLayer(testing::LayerParam("name: 'cat' type: 'Concat' concat_param { axis: 2 }"), &ctx);
  EXPECT_THROW(layer->Initialize({&a, &b}, {&top}), Error);
  auto legacy = CreateLayer(
      testing::LayerParam("name: 'cat' type: 'Concat' concat_param { concat_dim: 5 }"), &ctx);
  EXPECT_THROW(legacy->Initialize({&a, &b}, {&top}), Error);
}

}  // namespace
}  // namespace cortado
