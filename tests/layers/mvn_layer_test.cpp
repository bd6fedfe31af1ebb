// SPDX-License-Identifier: Apache-2.0
#include "layers/mvn_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::LayerParam;

std::string MvnText(bool normalize_variance, bool across_channels, float eps = 1e-9f) {
  return fmt::format(
      "name: 'mvn' type: 'MVN' mvn_param {{ normalize_variance: {} across_channels: {} eps: {} }}",
      normalize_variance ? "true" : "false", across_channels ? "true" : "false", eps);
}

// Caffe's formula written out in double: rows of `dim` values; y = x - mean, divided by
// sqrt(mean((x - mean)^2)) + eps when normalizing.
std::vector<double> Normalize(const std::vector<float>& x, int dim, bool normalize, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / dim; ++r) {
    double mean = 0.0;
    for (int j = 0; j < dim; ++j) mean += x[r * dim + j];
    mean /= dim;
    double var = 0.0;
    for (int j = 0; j < dim; ++j) var += (x[r * dim + j] - mean) * (x[r * dim + j] - mean);
    var /= dim;
    for (int j = 0; j < dim; ++j) {
      y[r * dim + j] = (x[r * dim + j] - mean) / (normalize ? std::sqrt(var) + eps : 1.0);
    }
  }
  return y;
}

TEST(MVNLayerTest, TopIsTheLegacyFourAxisShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'mvn' type: 'MVN'"), &ctx);
  Tensor bottom({2, 3, 4, 5}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
  // Caffe reshapes the top to N x C x H x W, so fewer axes gain trailing ones.
  Tensor flat({2, 3}), flat_top;
  auto layer2 = CreateLayer(LayerParam("name: 'mvn' type: 'MVN'"), &ctx);
  layer2->Initialize({&flat}, {&flat_top});
  EXPECT_EQ(flat_top.shape(), (std::vector<int>{2, 3, 1, 1}));
}

TEST(MVNLayerTest, ForwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'mvn' type: 'MVN'"), &ctx);
  Tensor bottom({1, 2, 2, 2}), top;
  // channel 0: mean 2.5, variance 1.25; channel 1: constant 2 (std 0: the top is 0 / eps = 0)
  testing::SetData(&bottom, {1, 2, 3, 4, 2, 2, 2, 2});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  const float s = std::sqrt(1.25f);
  const std::vector<float> expected = {-1.5f / s, -0.5f / s, 0.5f / s, 1.5f / s, 0, 0, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
}

TEST(MVNLayerTest, AcrossChannelsAndMeanOnly) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom({1, 2, 2, 2}), top;
  testing::SetData(&bottom, {1, 2, 3, 4, 2, 2, 2, 2});
  // Across channels: one row of 8, mean 18 / 8 = 2.25.
  auto mean_only = CreateLayer(LayerParam(MvnText(false, true)), &ctx);
  mean_only->Initialize({&bottom}, {&top});
  mean_only->Forward({&bottom}, {&top});
  EXPECT_EQ(Data(top),
            (std::vector<float>{-1.25f, -0.25f, 0.75f, 1.75f, -0.25f, -0.25f, -0.25f, -0.25f}));
  // Per channel, mean only: channel means 2.5 and 2.
  auto per_channel = CreateLayer(LayerParam(MvnText(false, false)), &ctx);
  per_channel->Initialize({&bottom}, {&top});
  per_channel->Forward({&bottom}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{-1.5f, -0.5f, 0.5f, 1.5f, 0, 0, 0, 0}));
}

// eps is added to the standard deviation after the square root (Caffe), not to the variance.
TEST(MVNLayerTest, EpsIsAddedToTheStd) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(MvnText(true, false, 0.5f)), &ctx);
  Tensor bottom({1, 1, 1, 2}), top;
  testing::SetData(&bottom, {1.0f, 5.0f});  // mean 3, std 2
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_FLOAT_EQ(top.cpu_data()[0], -2.0f / 2.5f);
  EXPECT_FLOAT_EQ(top.cpu_data()[1], 2.0f / 2.5f);
}

class MVNModeTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  std::string Text() const { return MvnText(std::get<0>(GetParam()), std::get<1>(GetParam())); }
};

TEST_P(MVNModeTest, ForwardMatchesFormula) {
  const auto [normalize, across] = GetParam();
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(Text()), &ctx);
  Tensor bottom({2, 3, 4, 5}), top;
  testing::FillGaussian(&bottom, 1.0f, 2.0f);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  const std::vector<double> expected = Normalize(Data(bottom), across ? 60 : 20, normalize, 1e-9);
  for (int i = 0; i < top.count(); ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-5) << i;
}

// Backward against Caffe's closed form, written out in double.
TEST_P(MVNModeTest, BackwardMatchesFormula) {
  const auto [normalize, across] = GetParam();
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(Text()), &ctx);
  Tensor bottom({2, 3, 2, 3}), top;
  testing::FillGaussian(&bottom, -0.5f, 1.5f);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  testing::FillGaussian(&top, 0.0f, 1.0f, 9);  // the diff to propagate, via the data
  const std::vector<float> dy = Data(top);
  std::copy(dy.begin(), dy.end(), top.mutable_cpu_diff());
  layer->Forward({&bottom}, {&top});  // restore the top data
  layer->Backward({&top}, {true}, {&bottom});
  const int dim = across ? 18 : 6;
  const std::vector<double> y = Normalize(Data(bottom), dim, normalize, 1e-9);
  const std::vector<double> centred = Normalize(Data(bottom), dim, false, 0.0);
  for (int r = 0; r < bottom.count() / dim; ++r) {
    double sum_dy = 0.0, sum_dy_y = 0.0, var = 0.0;
    for (int j = 0; j < dim; ++j) {
      sum_dy += dy[r * dim + j];
      sum_dy_y += dy[r * dim + j] * y[r * dim + j];
      var += centred[r * dim + j] * centred[r * dim + j];
    }
    const double s = std::sqrt(var / dim) + 1e-9;
    for (int j = 0; j < dim; ++j) {
      const int i = r * dim + j;
      const double expected =
          normalize ? (dy[i] - (sum_dy + y[i] * sum_dy_y) / dim) / s : dy[i] - sum_dy / dim;
      EXPECT_NEAR(bottom.cpu_diff()[i], expected, 1e-5) << i;
    }
  }
}

TEST_P(MVNModeTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(Text()), &ctx);
  Tensor bottom({2, 3, 2, 3}), top;
  testing::FillGaussian(&bottom, 0.5f, 2.0f);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST_P(MVNModeTest, InPlaceMatchesSeparateTop) {
  Tensor input({2, 3, 2, 3});
  testing::FillGaussian(&input, 0.5f, 2.0f);
  testing::ExpectInPlaceMatches(Text(), input);
}

INSTANTIATE_TEST_SUITE_P(Modes, MVNModeTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(MVNLayerTest, FiveAxesIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'mvn' type: 'MVN'"), &ctx);
  Tensor bottom({2, 3, 4, 5, 6}), top;
  try {
    layer->Initialize({&bottom}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'mvn' (MVN)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 4 5 6 (720)"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace cortado
