// SPDX-License-Identifier: Apache-2.0
#include "layers/bias_layer.hpp"

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

std::vector<float> Diff(const Tensor& t) {
  return std::vector<float>(t.cpu_diff(), t.cpu_diff() + t.count());
}

TEST(BiasLayerTest, ShapesAndDefaultFiller) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4, 5}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'b' type: 'Bias'"), &ctx);
  layer->Initialize({&in}, {&top});
  EXPECT_EQ(top.shape(), in.shape());
  ASSERT_EQ(layer->blobs().size(), 1u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{3}));
  EXPECT_EQ(Data(*layer->blobs()[0]), (std::vector<float>{0, 0, 0}));

  auto two_axes =
      CreateLayer(testing::LayerParam("name: 'b' type: 'Bias' bias_param { axis: 1 num_axes: 2 "
                                      "filler { type: 'constant' value: 3 } }"),
                  &ctx);
  two_axes->Initialize({&in}, {&top});
  EXPECT_EQ(two_axes->blobs()[0]->shape(), (std::vector<int>{3, 4}));
  EXPECT_EQ(two_axes->blobs()[0]->cpu_data()[11], 3.0f);

  auto rest = CreateLayer(
      testing::LayerParam("name: 'b' type: 'Bias' bias_param { axis: -2 num_axes: -1 }"), &ctx);
  rest->Initialize({&in}, {&top});
  EXPECT_EQ(rest->blobs()[0]->shape(), (std::vector<int>{4, 5}));

  auto scalar =
      CreateLayer(testing::LayerParam("name: 'b' type: 'Bias' bias_param { num_axes: 0 }"), &ctx);
  scalar->Initialize({&in}, {&top});
  EXPECT_EQ(scalar->blobs()[0]->count(), 1);
  EXPECT_EQ(scalar->blobs()[0]->num_axes(), 0);
}

TEST(BiasLayerTest, ForwardLearnedAndBackward) {
  Context ctx(Device::Cpu(), 1701);
  // x (2 x 3 x 2) = 0..11, bias [10 20 30] on axis 1: top[n][c][i] = x + bias[c].
  Tensor in({2, 3, 2}), top;
  for (int i = 0; i < 12; ++i) in.mutable_cpu_data()[i] = static_cast<float>(i);
  auto layer = CreateLayer(testing::LayerParam("name: 'b' type: 'Bias'"), &ctx);
  layer->Initialize({&in}, {&top});
  SetData(layer->blobs()[0].get(), {10, 20, 30});
  layer->Forward({&in}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{10, 11, 22, 23, 34, 35, 16, 17, 28, 29, 40, 41}));
  // With top diff 1..12, the bias diff for channel c sums its four entries; it accumulates.
  for (int i = 0; i < 12; ++i) top.mutable_cpu_diff()[i] = static_cast<float>(i + 1);
  SetData(layer->blobs()[0].get(), {10, 20, 30});
  std::fill(layer->blobs()[0]->mutable_cpu_diff(), layer->blobs()[0]->mutable_cpu_diff() + 3, 100);
  layer->Backward({&top}, {true}, {&in});
  // Channel 0: 1+2+7+8, channel 1: 3+4+9+10, channel 2: 5+6+11+12, plus the 100 already there.
  EXPECT_EQ(Diff(*layer->blobs()[0]), (std::vector<float>{118, 126, 134}));
  EXPECT_EQ(Diff(in)[5], 6.0f);
}

TEST(BiasLayerTest, ForwardSecondBottom) {
  Context ctx(Device::Cpu(), 1701);
  // Bias of shape 2 x 2 lined up with axes 1-2 of a 1 x 2 x 2 x 2 bottom of zeros.
  Tensor in({1, 2, 2, 2}), bias({2, 2}), top;
  SetData(&in, {0, 0, 0, 0, 0, 0, 0, 0});
  SetData(&bias, {1, 2, 3, 4});
  auto layer = CreateLayer(testing::LayerParam("name: 'b' type: 'Bias'"), &ctx);
  layer->Initialize({&in, &bias}, {&top});
  EXPECT_TRUE(layer->blobs().empty());
  layer->Forward({&in, &bias}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4}));
}

TEST(BiasLayerTest, InPlace) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({1, 2, 2});
  SetData(&in, {1, 2, 3, 4});
  auto layer = CreateLayer(
      testing::LayerParam(
          "name: 'b' type: 'Bias' bias_param { filler { type: 'constant' value: 0.5 } }"),
      &ctx);
  layer->Initialize({&in}, {&in});
  layer->Forward({&in}, {&in});
  EXPECT_EQ(Data(in), (std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f}));
}

TEST(BiasLayerTest, GradientLearned) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 2, 2}), top;
  testing::FillGaussian(&in);
  auto layer =
      CreateLayer(testing::LayerParam(
                      "name: 'b' type: 'Bias' bias_param { filler { type: 'gaussian' std: 1 } }"),
                  &ctx);
  testing::GradientChecker().Check(layer.get(), {&in}, {&top});
}

TEST(BiasLayerTest, GradientLearnedScalar) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 2}), top;
  testing::FillGaussian(&in);
  auto layer =
      CreateLayer(testing::LayerParam("name: 'b' type: 'Bias' bias_param { num_axes: 0 }"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&in}, {&top});
}

TEST(BiasLayerTest, GradientSecondBottom) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4}), bias({3, 4}), top;
  testing::FillGaussian(&in, 0, 1, 1);
  testing::FillGaussian(&bias, 0, 1, 2);
  auto layer = CreateLayer(testing::LayerParam("name: 'b' type: 'Bias'"), &ctx);
  testing::GradientChecker().Check(layer.get(), {&in, &bias}, {&top});
}

TEST(BiasLayerTest, MismatchedSecondBottomIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4}), bias({4}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'b' type: 'Bias'"), &ctx);
  try {
    layer->Initialize({&in, &bias}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 4 (24)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4 (4)"), std::string::npos) << msg;
  }
}

TEST(BiasLayerTest, NumAxesTooLargeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), top;
  auto layer =
      CreateLayer(testing::LayerParam("name: 'b' type: 'Bias' bias_param { num_axes: 2 }"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&top}), Error);
}

}  // namespace
}  // namespace cortado
