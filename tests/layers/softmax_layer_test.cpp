// SPDX-License-Identifier: Apache-2.0
#include "layers/softmax_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> MakeSoftmax(Context* ctx, const std::string& extra = "") {
  return CreateLayer(testing::LayerParam("name: 'prob' type: 'Softmax' " + extra), ctx);
}

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(t->count(), static_cast<int>(values.size()));
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

TEST(SoftmaxLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSoftmax(&ctx);
  Tensor bottom({2, 3, 4, 5}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(SoftmaxLayerTest, ForwardOfOneTwoThree) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSoftmax(&ctx);
  // exp(1), exp(2), exp(3) over their sum 30.1928: 0.0900306, 0.2447285, 0.6652410.
  Tensor bottom({1, 3}), top;
  SetData(&bottom, {1.0f, 2.0f, 3.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_NEAR(top.cpu_data()[0], 0.0900306f, 1e-6f);
  EXPECT_NEAR(top.cpu_data()[1], 0.2447285f, 1e-6f);
  EXPECT_NEAR(top.cpu_data()[2], 0.6652410f, 1e-6f);
}

TEST(SoftmaxLayerTest, LargeInputsDoNotOverflow) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSoftmax(&ctx);
  // Softmax is shift-invariant, so [1000, 1001, 1002] gives the values of [0, 1, 2], which are
  // those of [1, 2, 3]; without the max subtraction exp(1000) would be inf.
  Tensor bottom({1, 3}), top;
  SetData(&bottom, {1000.0f, 1001.0f, 1002.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_NEAR(top.cpu_data()[0], 0.0900306f, 1e-6f);
  EXPECT_NEAR(top.cpu_data()[2], 0.6652410f, 1e-6f);
}

TEST(SoftmaxLayerTest, ForwardAlongAxisWithInnerPositions) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSoftmax(&ctx);
  // Shape 1 x 3 x 2: position 0 has scores (1, 2, 3), position 1 has (5, 5, 5) -> 1/3 each.
  Tensor bottom({1, 3, 2}), top;
  SetData(&bottom, {1.0f, 5.0f, 2.0f, 5.0f, 3.0f, 5.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  const float* y = top.cpu_data();
  EXPECT_NEAR(y[0], 0.0900306f, 1e-6f);
  EXPECT_NEAR(y[2], 0.2447285f, 1e-6f);
  EXPECT_NEAR(y[4], 0.6652410f, 1e-6f);
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(y[2 * c + 1], 1.0f / 3.0f, 1e-6f);
}

TEST(SoftmaxLayerTest, NegativeAxisNormalizesLastAxis) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSoftmax(&ctx, "softmax_param { axis: -1 }");
  Tensor bottom({2, 3, 4}), top;
  testing::FillGaussian(&bottom);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  for (int row = 0; row < 6; ++row) {
    float sum = 0.0f;
    for (int k = 0; k < 4; ++k) sum += top.cpu_data()[row * 4 + k];
    EXPECT_NEAR(sum, 1.0f, 1e-5f) << "row " << row;
  }
}

TEST(SoftmaxLayerTest, InPlaceMatchesOutOfPlace) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom({2, 3, 2}), top, in_place({2, 3, 2});
  testing::FillGaussian(&bottom);
  in_place.CopyFrom(bottom);
  auto layer = MakeSoftmax(&ctx);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  auto layer2 = MakeSoftmax(&ctx);
  layer2->Initialize({&in_place}, {&in_place});
  layer2->Forward({&in_place}, {&in_place});
  for (int i = 0; i < top.count(); ++i) EXPECT_FLOAT_EQ(in_place.cpu_data()[i], top.cpu_data()[i]);
}

TEST(SoftmaxLayerTest, GradientDefaultAxis) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSoftmax(&ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST(SoftmaxLayerTest, GradientAxisZeroAndLast) {
  for (const char* axis : {"0", "-1"}) {
    SCOPED_TRACE(axis);
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakeSoftmax(&ctx, std::string("softmax_param { axis: ") + axis + " }");
    Tensor bottom({3, 2, 4}), top;
    testing::FillGaussian(&bottom, 0.0f, 1.0f, 7);
    testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
  }
}

TEST(SoftmaxLayerTest, AxisOutOfRangeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSoftmax(&ctx, "softmax_param { axis: 4 }");
  Tensor bottom({2, 3, 4, 5}), top;
  EXPECT_THROW(layer->Initialize({&bottom}, {&top}), Error);
}

TEST(SoftmaxLayerTest, WrongBlobCountIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSoftmax(&ctx);
  Tensor a({2, 3}), b({2, 3}), top;
  EXPECT_THROW(layer->Initialize({&a, &b}, {&top}), Error);
}

}  // namespace
}  // namespace cortado
