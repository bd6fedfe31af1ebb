// SPDX-License-Identifier: Apache-2.0
#include "layers/batch_norm_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(static_cast<int>(values.size()), t->count());
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

void ExpectNear(const float* actual, const std::vector<float>& expected, float tol) {
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
  }
}

// A 2 x 2 x 1 x 2 bottom: channel 0 holds 1 2 | 3 4 (mean 2.5, variance 1.25), channel 1
// holds 10 10 | 10 14 (mean 11, variance 3), "|" separating the two images.
void FillExample(Tensor* t) {
  t->Reshape({2, 2, 1, 2});
  SetData(t, {1, 2, 10, 10, 3, 4, 10, 14});
}

TEST(BatchNormLayerTest, ShapesBlobsAndFrozenParams) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 4, 5}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
  layer->Initialize({&in}, {&top});
  EXPECT_EQ(top.shape(), in.shape());
  ASSERT_EQ(layer->blobs().size(), 3u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{3}));
  EXPECT_EQ(layer->blobs()[1]->shape(), (std::vector<int>{3}));
  EXPECT_EQ(layer->blobs()[2]->shape(), (std::vector<int>{1}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(layer->blobs()[i]->asum_data(), 0.0f);
    EXPECT_FALSE(layer->param_propagate_down(i));
  }
  ASSERT_EQ(layer->layer_param().param_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(layer->layer_param().param(i).lr_mult(), 0.0f);
}

TEST(BatchNormLayerTest, ForwardBatchStatisticsAndRunningAverages) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in, top;
  FillExample(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
  layer->Initialize({&in}, {&top});
  layer->Forward({&in}, {&top});
  const float s0 = std::sqrt(1.25f + 1e-5f), s1 = std::sqrt(3.0f + 1e-5f);
  ExpectNear(top.cpu_data(),
             {-1.5f / s0, -0.5f / s0, -1 / s1, -1 / s1, 0.5f / s0, 1.5f / s0, -1 / s1, 3 / s1},
             1e-5f);
  // Running sums after one step: normaliser 1, mean sums = batch means, variance sums =
  // m / (m - 1) * batch variances with m = 4.
  ExpectNear(layer->blobs()[0]->cpu_data(), {2.5f, 11}, 1e-5f);
  ExpectNear(layer->blobs()[1]->cpu_data(), {1.25f * 4 / 3, 4}, 1e-5f);
  ExpectNear(layer->blobs()[2]->cpu_data(), {1}, 0);
  // A second step decays the sums by 0.999 and adds the new statistics.
  layer->Forward({&in}, {&top});
  ExpectNear(layer->blobs()[2]->cpu_data(), {1.999f}, 1e-6f);
  ExpectNear(layer->blobs()[0]->cpu_data(), {2.5f * 1.999f, 11 * 1.999f}, 1e-4f);
  ExpectNear(layer->blobs()[1]->cpu_data(), {1.25f * 4 / 3 * 1.999f, 4 * 1.999f}, 1e-4f);
}

TEST(BatchNormLayerTest, BackwardBatchStatistics) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in, top;
  FillExample(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
  layer->Initialize({&in}, {&top});
  layer->Forward({&in}, {&top});
  // dy = 1 on the first element of channel 0, else 0. With y = (-1.5 -0.5 0.5 1.5) / 1.118034:
  // mean(dy) = 0.25, mean(dy * y) = y[0] / 4 = -0.335410, and
  // dx = (dy - 0.25 + 0.335410 * y) / 1.118034 = (0.3 -0.4 -0.1 0.2) / 1.118034.
  // Channel 1 gets no gradient.
  std::fill(top.mutable_cpu_diff(), top.mutable_cpu_diff() + 8, 0.0f);
  top.mutable_cpu_diff()[0] = 1.0f;
  layer->Backward({&top}, {true}, {&in});
  ExpectNear(in.cpu_diff(), {0.268328f, -0.357771f, 0, 0, -0.0894427f, 0.178885f, 0, 0}, 1e-5f);
}

TEST(BatchNormLayerTest, ForwardBackwardGlobalStatistics) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in, top;
  FillExample(&in);
  auto layer =
      CreateLayer(testing::LayerParam(
                      "name: 'bn' type: 'BatchNorm' batch_norm_param { use_global_stats: true }"),
                  &ctx);
  layer->Initialize({&in}, {&top});
  // Stored sums with normaliser 2: mean (1, 2), variance (4, 9).
  SetData(layer->blobs()[0].get(), {2, 4});
  SetData(layer->blobs()[1].get(), {8, 18});
  SetData(layer->blobs()[2].get(), {2});
  layer->Forward({&in}, {&top});
  const float s0 = std::sqrt(4 + 1e-5f), s1 = std::sqrt(9 + 1e-5f);
  ExpectNear(top.cpu_data(), {0, 1 / s0, 8 / s1, 8 / s1, 2 / s0, 3 / s0, 8 / s1, 12 / s1}, 1e-5f);
  // The stored statistics do not move.
  ExpectNear(layer->blobs()[0]->cpu_data(), {2, 4}, 0);
  ExpectNear(layer->blobs()[2]->cpu_data(), {2}, 0);
  // dx = dy / sqrt(var + eps).
  std::fill(top.mutable_cpu_diff(), top.mutable_cpu_diff() + 8, 1.0f);
  layer->Backward({&top}, {true}, {&in});
  ExpectNear(in.cpu_diff(), {1 / s0, 1 / s0, 1 / s1, 1 / s1, 1 / s0, 1 / s0, 1 / s1, 1 / s1},
             1e-6f);
}

TEST(BatchNormLayerTest, TestPhaseDefaultsToGlobalStatistics) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in, top;
  FillExample(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm' phase: TEST"), &ctx);
  layer->Initialize({&in}, {&top});
  // A zero normaliser (untrained) gives zero statistics: y = x / sqrt(eps).
  layer->Forward({&in}, {&top});
  const float s = std::sqrt(1e-5f);
  EXPECT_NEAR(top.cpu_data()[1], 2 / s, 1e-2f);
  EXPECT_EQ(layer->blobs()[2]->cpu_data()[0], 0.0f);
}

TEST(BatchNormLayerTest, InPlaceMatchesOutOfPlace) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3, 2, 2}), b({2, 3, 2, 2}), top;
  testing::FillGaussian(&a, 1, 2, 3);
  testing::FillGaussian(&b, 1, 2, 3);
  auto out_of_place = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
  auto in_place = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
  out_of_place->Initialize({&a}, {&top});
  in_place->Initialize({&b}, {&b});
  out_of_place->Forward({&a}, {&top});
  in_place->Forward({&b}, {&b});
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(top.cpu_data()[i], b.cpu_data()[i]);
    top.mutable_cpu_diff()[i] = b.mutable_cpu_diff()[i] = std::sin(static_cast<float>(i));
  }
  out_of_place->Backward({&top}, {true}, {&a});
  in_place->Backward({&b}, {true}, {&b});
  for (int i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(a.cpu_diff()[i], b.cpu_diff()[i]);
}

TEST(BatchNormLayerTest, GradientBatchStatistics) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 2, 3}), top;
  testing::FillGaussian(&in, 0.5f, 2.0f);
  auto layer = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
  testing::GradientCheckOptions options;
  options.check_params = false;  // running statistics, not parameters
  testing::GradientChecker(options).Check(layer.get(), {&in}, {&top});
}

TEST(BatchNormLayerTest, GradientBatchStatisticsTwoAxes) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({5, 3}), top;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
  testing::GradientCheckOptions options;
  options.check_params = false;
  testing::GradientChecker(options).Check(layer.get(), {&in}, {&top});
}

TEST(BatchNormLayerTest, GradientGlobalStatistics) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3, 2, 2}), top;
  testing::FillGaussian(&in);
  auto layer =
      CreateLayer(testing::LayerParam(
                      "name: 'bn' type: 'BatchNorm' batch_norm_param { use_global_stats: true }"),
                  &ctx);
  layer->Initialize({&in}, {&top});
  SetData(layer->blobs()[0].get(), {0.3f, -0.6f, 1.5f});
  SetData(layer->blobs()[1].get(), {1.5f, 0.9f, 6});
  SetData(layer->blobs()[2].get(), {1.5f});
  testing::GradientCheckOptions options;
  options.check_params = false;
  testing::GradientChecker(options).Check(layer.get(), {&in}, {&top});
}

TEST(BatchNormLayerTest, LearnableStatisticsAreAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'bn' type: 'BatchNorm' param { lr_mult: 0 } param { lr_mult: 1 }"),
      &ctx);
  try {
    layer->Initialize({&in}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'bn'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lr_mult"), std::string::npos) << msg;
  }
}

TEST(BatchNormLayerTest, ChannelChangeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 3}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
  layer->Initialize({&in}, {&top});
  in.Reshape({2, 4});
  EXPECT_THROW(layer->Reshape({&in}, {&top}), Error);
}

TEST(BatchNormLayerTest, OneAxisIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({6}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&top}), Error);
}

}  // namespace
}  // namespace cortado
