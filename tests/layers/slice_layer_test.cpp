// SPDX-License-Identifier: Apache-2.0
#include "layers/slice_layer.hpp"

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

TEST(SliceLayerTest, Shapes) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({6, 12, 2, 3}), a, b, c;
  auto equal = CreateLayer(testing::LayerParam("name: 'sl' type: 'Slice'"), &ctx);
  equal->Initialize({&in}, {&a, &b, &c});
  EXPECT_EQ(a.shape(), (std::vector<int>{6, 4, 2, 3}));
  EXPECT_EQ(c.shape(), (std::vector<int>{6, 4, 2, 3}));

  auto points = CreateLayer(
      testing::LayerParam("name: 'sl' type: 'Slice' slice_param { slice_point: 2 slice_point: 7 }"),
      &ctx);
  points->Initialize({&in}, {&a, &b, &c});
  EXPECT_EQ(a.shape(), (std::vector<int>{6, 2, 2, 3}));
  EXPECT_EQ(b.shape(), (std::vector<int>{6, 5, 2, 3}));
  EXPECT_EQ(c.shape(), (std::vector<int>{6, 5, 2, 3}));

  auto legacy = CreateLayer(
      testing::LayerParam("name: 'sl' type: 'Slice' slice_param { slice_dim: 0 }"), &ctx);
  legacy->Initialize({&in}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{3, 12, 2, 3}));

  auto last = CreateLayer(
      testing::LayerParam("name: 'sl' type: 'Slice' slice_param { axis: -1 slice_point: 1 }"),
      &ctx);
  last->Initialize({&in}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{6, 12, 2, 1}));
  EXPECT_EQ(b.shape(), (std::vector<int>{6, 12, 2, 2}));
}

TEST(SliceLayerTest, ForwardWithSlicePoints) {
  Context ctx(Device::Cpu(), 1701);
  // Rows [0..5] and [10..15] cut at columns 1 and 4.
  Tensor in({2, 6}), a, b, c;
  SetData(&in, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  auto layer = CreateLayer(
      testing::LayerParam("name: 'sl' type: 'Slice' slice_param { slice_point: 1 slice_point: 4 }"),
      &ctx);
  layer->Initialize({&in}, {&a, &b, &c});
  layer->Forward({&in}, {&a, &b, &c});
  EXPECT_EQ(Data(a), (std::vector<float>{0, 10}));
  EXPECT_EQ(Data(b), (std::vector<float>{1, 2, 3, 11, 12, 13}));
  EXPECT_EQ(Data(c), (std::vector<float>{4, 5, 14, 15}));
  // Backward puts each top's diff back where it came from.
  std::fill(a.mutable_cpu_diff(), a.mutable_cpu_diff() + 2, 1.0f);
  std::fill(b.mutable_cpu_diff(), b.mutable_cpu_diff() + 6, 2.0f);
  std::fill(c.mutable_cpu_diff(), c.mutable_cpu_diff() + 4, 3.0f);
  layer->Backward({&a, &b, &c}, {true}, {&in});
  EXPECT_EQ(std::vector<float>(in.cpu_diff(), in.cpu_diff() + 12),
            (std::vector<float>{1, 2, 2, 2, 3, 3, 1, 2, 2, 2, 3, 3}));
}

TEST(SliceLayerTest, ForwardEqualPartsAxis0) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({4, 2}), a, b;
  SetData(&in, {0, 1, 2, 3, 4, 5, 6, 7});
  auto layer =
      CreateLayer(testing::LayerParam("name: 'sl' type: 'Slice' slice_param { axis: 0 }"), &ctx);
  layer->Initialize({&in}, {&a, &b});
  layer->Forward({&in}, {&a, &b});
  EXPECT_EQ(Data(a), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(Data(b), (std::vector<float>{4, 5, 6, 7}));
}

TEST(SliceLayerTest, GradientSlicePoints) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 6, 2, 2}), a, b, c;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'sl' type: 'Slice' slice_param { slice_point: 1 slice_point: 3 }"),
      &ctx);
  testing::GradientChecker().Check(layer.get(), {&in}, {&a, &b, &c});
}

TEST(SliceLayerTest, GradientEqualPartsLastAxis) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4}), a, b;
  testing::FillGaussian(&in);
  auto layer =
      CreateLayer(testing::LayerParam("name: 'sl' type: 'Slice' slice_param { axis: -1 }"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&in}, {&a, &b});
}

TEST(SliceLayerTest, GradientSingleTop) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), a;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'sl' type: 'Slice'"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&in}, {&a});
  EXPECT_EQ(a.cpu_data(), in.cpu_data());
}

TEST(SliceLayerTest, SlicePointsOutOfOrderIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 6}), a, b, c;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'sl' type: 'Slice' slice_param { slice_point: 4 slice_point: 2 }"),
      &ctx);
  try {
    layer->Initialize({&in}, {&a, &b, &c});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'sl'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("slice_point 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 6 (12)"), std::string::npos) << msg;
  }
}

TEST(SliceLayerTest, SlicePointPastTheEndIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 6}), a, b;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'sl' type: 'Slice' slice_param { slice_point: 6 }"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&a, &b}), Error);
}

TEST(SliceLayerTest, WrongNumberOfSlicePointsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 6}), a, b;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'sl' type: 'Slice' slice_param { slice_point: 1 slice_point: 2 }"),
      &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&a, &b}), Error);
}

TEST(SliceLayerTest, UnevenEqualSplitIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 5}), a, b;
  auto layer = CreateLayer(testing::LayerParam("name: 'sl' type: 'Slice'"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&a, &b}), Error);
}

TEST(SliceLayerTest, AxisAndSliceDimTogetherIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 6}), a, b;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'sl' type: 'Slice' slice_param { axis: 1 slice_dim: 1 }"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&a, &b}), Error);
}

}  // namespace
}  // namespace cortado
