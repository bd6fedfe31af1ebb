// SPDX-License-Identifier: Apache-2.0
#include "layers/scale_layer.hpp"

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

void FillIota(Tensor* t) {
  for (int i = 0; i < t->count(); ++i) t->mutable_cpu_data()[i] = static_cast<float>(i);
}

TEST(ScaleLayerTest, ShapesAndBlobLayout) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4, 5}), top;
  auto plain = CreateLayer(testing::LayerParam("name: 's' type: 'Scale'"), &ctx);
  plain->Initialize({&in}, {&top});
  EXPECT_EQ(top.shape(), in.shape());
  ASSERT_EQ(plain->blobs().size(), 1u);
  EXPECT_EQ(plain->blobs()[0]->shape(), (std::vector<int>{3}));
  EXPECT_EQ(Data(*plain->blobs()[0]), (std::vector<float>{1, 1, 1}));  // default filler: 1

  // bias_term: blobs are [scale, bias], the bias filled by bias_filler (default 0).
  auto with_bias =
      CreateLayer(testing::LayerParam("name: 's' type: 'Scale' scale_param { bias_term: true "
                                      "bias_filler { type: 'constant' value: 0.5 } }"),
                  &ctx);
  with_bias->Initialize({&in}, {&top});
  ASSERT_EQ(with_bias->blobs().size(), 2u);
  EXPECT_EQ(Data(*with_bias->blobs()[0]), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(Data(*with_bias->blobs()[1]), (std::vector<float>{0.5f, 0.5f, 0.5f}));

  auto default_bias =
      CreateLayer(testing::LayerParam("name: 's' type: 'Scale' scale_param { axis: 2 num_axes: -1 "
                                      "bias_term: true }"),
                  &ctx);
  default_bias->Initialize({&in}, {&top});
  EXPECT_EQ(default_bias->blobs()[0]->shape(), (std::vector<int>{4, 5}));
  EXPECT_EQ(default_bias->blobs()[1]->shape(), (std::vector<int>{4, 5}));
  EXPECT_EQ(default_bias->blobs()[1]->asum_data(), 0.0f);

  // With the scale as a second bottom the only blob is the bias, shaped like bottom[1].
  Tensor scale({3, 4});
  auto two = CreateLayer(
      testing::LayerParam("name: 's' type: 'Scale' scale_param { bias_term: true }"), &ctx);
  two->Initialize({&in, &scale}, {&top});
  ASSERT_EQ(two->blobs().size(), 1u);
  EXPECT_EQ(two->blobs()[0]->shape(), (std::vector<int>{3, 4}));

  auto scalar =
      CreateLayer(testing::LayerParam("name: 's' type: 'Scale' scale_param { num_axes: 0 }"), &ctx);
  scalar->Initialize({&in}, {&top});
  EXPECT_EQ(scalar->blobs()[0]->num_axes(), 0);
}

TEST(ScaleLayerTest, ForwardLearnedWithBias) {
  Context ctx(Device::Cpu(), 1701);
  // x (2 x 3 x 2) = 0..11, scale [1 2 3], bias [10 20 30] on axis 1:
  // top[n][c][i] = x * scale[c] + bias[c].
  Tensor in({2, 3, 2}), top;
  FillIota(&in);
  auto layer = CreateLayer(
      testing::LayerParam("name: 's' type: 'Scale' scale_param { bias_term: true }"), &ctx);
  layer->Initialize({&in}, {&top});
  SetData(layer->blobs()[0].get(), {1, 2, 3});
  SetData(layer->blobs()[1].get(), {10, 20, 30});
  layer->Forward({&in}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{10, 11, 24, 26, 42, 45, 16, 17, 36, 38, 60, 63}));

  // Backward with top diff 1: scale diff[c] = sum of x in channel c, bias diff[c] = 4, and
  // bottom diff = scale[c]. Param diffs accumulate onto what is there.
  std::fill(top.mutable_cpu_diff(), top.mutable_cpu_diff() + 12, 1.0f);
  for (auto& blob : layer->blobs()) {
    std::fill(blob->mutable_cpu_diff(), blob->mutable_cpu_diff() + 3, 1.0f);
  }
  layer->Backward({&top}, {true}, {&in});
  // Channel 0: 0+1+6+7, channel 1: 2+3+8+9, channel 2: 4+5+10+11 (each +1).
  EXPECT_EQ(Diff(*layer->blobs()[0]), (std::vector<float>{15, 23, 31}));
  EXPECT_EQ(Diff(*layer->blobs()[1]), (std::vector<float>{5, 5, 5}));
  EXPECT_EQ(Diff(in), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
}

TEST(ScaleLayerTest, ForwardSecondBottomScalar) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 2}), scale(std::vector<int>{}), top;
  FillIota(&in);
  SetData(&scale, {-2});
  auto layer = CreateLayer(testing::LayerParam("name: 's' type: 'Scale'"), &ctx);
  layer->Initialize({&in, &scale}, {&top});
  layer->Forward({&in, &scale}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{0, -2, -4, -6}));
}

TEST(ScaleLayerTest, InPlaceMatchesOutOfPlace) {
  Context ctx(Device::Cpu(), 1701);
  const std::string text =
      "name: 's' type: 'Scale' scale_param { bias_term: true filler { type: 'gaussian' } "
      "bias_filler { type: 'gaussian' } }";
  Tensor a({2, 3, 2}), b({2, 3, 2}), top;
  testing::FillGaussian(&a, 0, 1, 5);
  testing::FillGaussian(&b, 0, 1, 5);
  auto out_of_place = CreateLayer(testing::LayerParam(text), &ctx);
  ctx.Seed(7);
  out_of_place->Initialize({&a}, {&top});
  auto in_place = CreateLayer(testing::LayerParam(text), &ctx);
  ctx.Seed(7);
  in_place->Initialize({&b}, {&b});
  out_of_place->Forward({&a}, {&top});
  in_place->Forward({&b}, {&b});
  EXPECT_EQ(Data(top), Data(b));
  for (int i = 0; i < 12; ++i) {
    top.mutable_cpu_diff()[i] = b.mutable_cpu_diff()[i] = 0.25f * static_cast<float>(i);
  }
  for (auto* layer : {out_of_place.get(), in_place.get()}) {
    for (auto& blob : layer->blobs())
      std::fill(blob->mutable_cpu_diff(), blob->mutable_cpu_diff() + 3, 0.0f);
  }
  out_of_place->Backward({&top}, {true}, {&a});
  in_place->Backward({&b}, {true}, {&b});
  EXPECT_EQ(Diff(a), Diff(b));
  EXPECT_EQ(Diff(*out_of_place->blobs()[0]), Diff(*in_place->blobs()[0]));
  EXPECT_EQ(Diff(*out_of_place->blobs()[1]), Diff(*in_place->blobs()[1]));
}

void CheckGradient(const std::string& scale_param, const std::vector<int>& scale_shape,
                   bool second_bottom) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 2, 2}), scale(scale_shape), top;
  testing::FillGaussian(&in, 0, 1, 1);
  testing::FillGaussian(&scale, 0, 1, 2);
  auto layer = CreateLayer(
      testing::LayerParam("name: 's' type: 'Scale' scale_param { filler { type: 'gaussian' } "
                          "bias_filler { type: 'gaussian' } " +
                          scale_param + " }"),
      &ctx);
  std::vector<Tensor*> bottom = {&in};
  if (second_bottom) bottom.push_back(&scale);
  testing::GradientChecker().Check(layer.get(), bottom, {&top});
}

TEST(ScaleLayerTest, GradientLearned) { CheckGradient("", {}, false); }

TEST(ScaleLayerTest, GradientLearnedWithBias) { CheckGradient("bias_term: true", {}, false); }

TEST(ScaleLayerTest, GradientLearnedTwoAxesWithBias) {
  CheckGradient("axis: 1 num_axes: 2 bias_term: true", {}, false);
}

TEST(ScaleLayerTest, GradientLearnedScalarWithBias) {
  CheckGradient("num_axes: 0 bias_term: true", {}, false);
}

TEST(ScaleLayerTest, GradientSecondBottom) { CheckGradient("", {3, 2}, true); }

TEST(ScaleLayerTest, GradientSecondBottomWithBias) { CheckGradient("bias_term: true", {3}, true); }

TEST(ScaleLayerTest, GradientSecondBottomElementwise) {
  CheckGradient("axis: 0", {2, 3, 2, 2}, true);
}

TEST(ScaleLayerTest, GradientSecondBottomScalar) { CheckGradient("", {}, true); }

TEST(ScaleLayerTest, MismatchedSecondBottomIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4}), scale({4}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 's' type: 'Scale'"), &ctx);
  try {
    layer->Initialize({&in, &scale}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'s'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 4 (24)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4 (4)"), std::string::npos) << msg;
  }
}

TEST(ScaleLayerTest, NumAxesTooLargeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 's' type: 'Scale' scale_param { axis: 1 num_axes: 2 }"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&top}), Error);
}

TEST(ScaleLayerTest, AxisOutOfRangeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), top;
  auto layer =
      CreateLayer(testing::LayerParam("name: 's' type: 'Scale' scale_param { axis: 2 }"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&top}), Error);
}

}  // namespace
}  // namespace cortado
