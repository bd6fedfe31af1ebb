// SPDX-License-Identifier: Apache-2.0
#include "layers/inner_product_layer.hpp"

#include <gtest/gtest.h>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

std::string IpText(int num_output, const std::string& extra = "") {
  return fmt::format(
      "name: 'ip' type: 'InnerProduct' inner_product_param {{ num_output: {} "
      "weight_filler {{ type: 'gaussian' std: 0.5 }} bias_filler {{ type: 'uniform' min: -1 "
      "max: 1 }} {} }}",
      num_output, extra);
}

TEST(InnerProductLayerTest, ShapesFromDefaultAxis) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(IpText(10)), &ctx);
  Tensor bottom({2, 3, 4, 5}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 10}));
  ASSERT_EQ(layer->blobs().size(), 2u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{10, 60}));  // N x K
  EXPECT_EQ(layer->blobs()[1]->shape(), (std::vector<int>{10}));
}

TEST(InnerProductLayerTest, ShapesWithAxisTransposeAndNoBias) {
  Context ctx(Device::Cpu(), 1701);
  auto layer =
      CreateLayer(LayerParam(IpText(7, "axis: -2 transpose: true bias_term: false")), &ctx);
  Tensor bottom({2, 3, 4, 5}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 3, 7}));  // axes before 2 kept, K = 4 * 5
  ASSERT_EQ(layer->blobs().size(), 1u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{20, 7}));  // K x N
}

TEST(InnerProductLayerTest, FillersAreApplied) {
  Context ctx(Device::Cpu(), 1701);
  auto layer =
      CreateLayer(LayerParam("name: 'ip' type: 'InnerProduct' inner_product_param { num_output: 3 "
                             "weight_filler { type: 'constant' value: 0.5 } "
                             "bias_filler { type: 'constant' value: -2 } }"),
                  &ctx);
  Tensor bottom({2, 4}), top;
  layer->Initialize({&bottom}, {&top});
  for (float w : Data(*layer->blobs()[0])) EXPECT_EQ(w, 0.5f);
  for (float b : Data(*layer->blobs()[1])) EXPECT_EQ(b, -2.0f);
}

TEST(InnerProductLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(IpText(2)), &ctx);
  Tensor bottom({2, 3}), top;
  testing::SetData(&bottom, {1, 2, 3, 4, 5, 6});
  layer->Initialize({&bottom}, {&top});
  testing::SetData(layer->blobs()[0].get(), {1, 0, -1, 0.5f, 0.5f, 0.5f});  // W, 2 x 3
  testing::SetData(layer->blobs()[1].get(), {1, -1});
  layer->Forward({&bottom}, {&top});
  // y = x W^T + b: row 1: (1 - 3 + 1, 3 - 1); row 2: (4 - 6 + 1, 7.5 - 1)
  EXPECT_EQ(Data(top), (std::vector<float>{-1, 2, -1, 6.5f}));

  testing::SetData(&top, {0, 0, 0, 0});  // Backward must not read the top data
  std::vector<float> dy = {1, 0, 0, 1};
  std::copy(dy.begin(), dy.end(), top.mutable_cpu_diff());
  for (auto& p : layer->blobs()) std::fill_n(p->mutable_cpu_diff(), p->count(), 0.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // dx = dy W = rows of W; dW = dy^T x = rows of x; db = column sums of dy
  EXPECT_EQ(Diff(bottom), (std::vector<float>{1, 0, -1, 0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(Diff(*layer->blobs()[0]), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(Diff(*layer->blobs()[1]), (std::vector<float>{1, 1}));

  // Parameter gradients accumulate; the bottom diff is overwritten.
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_EQ(Diff(*layer->blobs()[0]), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(Diff(*layer->blobs()[1]), (std::vector<float>{2, 2}));
  EXPECT_EQ(Diff(bottom), (std::vector<float>{1, 0, -1, 0.5f, 0.5f, 0.5f}));
}

TEST(InnerProductLayerTest, ParamPropagateDownOffLeavesParamDiffs) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(IpText(2)), &ctx);
  Tensor bottom({2, 3}), top;
  testing::FillGaussian(&bottom);
  layer->Initialize({&bottom}, {&top});
  layer->set_param_propagate_down(0, false);
  layer->set_param_propagate_down(1, false);
  layer->Forward({&bottom}, {&top});
  std::fill_n(top.mutable_cpu_diff(), top.count(), 1.0f);
  for (auto& p : layer->blobs()) std::fill_n(p->mutable_cpu_diff(), p->count(), 3.0f);
  layer->Backward({&top}, {true}, {&bottom});
  for (auto& p : layer->blobs()) {
    for (float d : Diff(*p)) EXPECT_EQ(d, 3.0f);
  }
}

// axis 2 and transposed weights, against plain loops over the Caffe definition.
TEST(InnerProductLayerTest, AxisTwoTransposeMatchesNaiveLoops) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(IpText(5, "axis: 2 transpose: true")), &ctx);
  Tensor bottom({2, 3, 4, 2}), top;
  testing::FillGaussian(&bottom);
  layer->Initialize({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{2, 3, 5}));
  const int m = 6, k = 8, n = 5;
  const float* x = bottom.cpu_data();
  const float* w = layer->blobs()[0]->cpu_data();  // K x N
  const float* b = layer->blobs()[1]->cpu_data();
  layer->Forward({&bottom}, {&top});
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = b[j];
      for (int p = 0; p < k; ++p) sum += static_cast<double>(x[i * k + p]) * w[p * n + j];
      EXPECT_NEAR(top.cpu_data()[i * n + j], sum, 1e-5) << i << "," << j;
    }
  }
  testing::FillGaussian(&top, 0.0f, 1.0f, 3);
  std::copy(top.cpu_data(), top.cpu_data() + top.count(), top.mutable_cpu_diff());
  const float* dy = top.cpu_diff();
  for (auto& p : layer->blobs()) std::fill_n(p->mutable_cpu_diff(), p->count(), 0.0f);
  layer->Backward({&top}, {true}, {&bottom});
  for (int i = 0; i < m; ++i) {
    for (int p = 0; p < k; ++p) {
      double sum = 0.0;
      for (int j = 0; j < n; ++j) sum += static_cast<double>(dy[i * n + j]) * w[p * n + j];
      EXPECT_NEAR(bottom.cpu_diff()[i * k + p], sum, 1e-5) << "dx " << i << "," << p;
    }
  }
  for (int p = 0; p < k; ++p) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int i = 0; i < m; ++i) sum += static_cast<double>(x[i * k + p]) * dy[i * n + j];
      EXPECT_NEAR(layer->blobs()[0]->cpu_diff()[p * n + j], sum, 1e-5) << "dW " << p << "," << j;
    }
  }
  for (int j = 0; j < n; ++j) {
    double sum = 0.0;
    for (int i = 0; i < m; ++i) sum += dy[i * n + j];
    EXPECT_NEAR(layer->blobs()[1]->cpu_diff()[j], sum, 1e-5) << "db " << j;
  }
}

class InnerProductOptionsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(InnerProductOptionsTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(IpText(4, GetParam())), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

INSTANTIATE_TEST_SUITE_P(Options, InnerProductOptionsTest,
                         ::testing::Values("", "transpose: true", "axis: 2", "bias_term: false",
                                           "axis: -1 transpose: true bias_term: false"));

TEST(InnerProductLayerTest, InputSizeNotMatchingWeightsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(IpText(10)), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});  // weights 10 x 12
  bottom.Reshape({2, 5, 4});             // K = 20 now
  try {
    layer->Reshape({&bottom}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'ip'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 5 4 (40)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("10 12 (120)"), std::string::npos) << msg;
  }
  // A new batch size alone is fine.
  bottom.Reshape({7, 3, 4});
  layer->Reshape({&bottom}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{7, 10}));
}

TEST(InnerProductLayerTest, LoadedWeightsAreKeptAndChecked) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(IpText(3)), &ctx);
  // Blobs already present (as from a model) are used as they are.
  layer->blobs().push_back(std::make_shared<Tensor>(std::vector<int>{3, 4}));
  layer->blobs().push_back(std::make_shared<Tensor>(std::vector<int>{3}));
  std::fill_n(layer->blobs()[0]->mutable_cpu_data(), 12, 1.0f);
  std::fill_n(layer->blobs()[1]->mutable_cpu_data(), 3, 0.5f);
  Tensor bottom({1, 4}), top;
  std::fill_n(bottom.mutable_cpu_data(), 4, 2.0f);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{8.5f, 8.5f, 8.5f}));  // 4 * 2 * 1 + 0.5

  Context ctx2(Device::Cpu(), 1701);
  auto wrong = CreateLayer(LayerParam(IpText(3)), &ctx2);
  wrong->blobs().push_back(std::make_shared<Tensor>(std::vector<int>{3, 5}));
  wrong->blobs().push_back(std::make_shared<Tensor>(std::vector<int>{3}));
  EXPECT_THROW(wrong->Initialize({&bottom}, {&top}), Error);
}

TEST(InnerProductLayerTest, BadParamsAreErrors) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom({2, 3}), top;
  auto zero = CreateLayer(
      LayerParam("name: 'ip' type: 'InnerProduct' inner_product_param { num_output: 0 }"), &ctx);
  EXPECT_THROW(zero->Initialize({&bottom}, {&top}), Error);
  auto bad_axis = CreateLayer(LayerParam(IpText(2, "axis: 3")), &ctx);
  EXPECT_THROW(bad_axis->Initialize({&bottom}, {&top}), Error);
  // K == N on the last axis would give the bottom's shape, but a GEMM cannot run in place.
  Tensor square({2, 3});
  auto in_place = CreateLayer(LayerParam(IpText(3)), &ctx);
  EXPECT_THROW(in_place->Initialize({&square}, {&square}), Error);
}

}  // namespace
}  // namespace cortado
