// SPDX-License-Identifier: Apache-2.0
#include "layers/lrn_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(static_cast<int>(values.size()), t->count());
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

void ExpectNear(const Tensor& t, const std::vector<float>& expected, float tol) {
  ASSERT_EQ(static_cast<int>(expected.size()), t.count());
  for (int i = 0; i < t.count(); ++i) EXPECT_NEAR(t.cpu_data()[i], expected[i], tol) << i;
}

TEST(LRNLayerTest, Shapes) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({2, 7, 3, 3}), top;
  auto across = CreateLayer(testing::LayerParam("name: 'norm' type: 'LRN'"), &ctx);
  across->Initialize({&in}, {&top});
  EXPECT_EQ(top.shape(), in.shape());
  auto within = CreateLayer(
      testing::LayerParam("name: 'norm' type: 'LRN' lrn_param { norm_region: WITHIN_CHANNEL }"),
      &ctx);
  within->Initialize({&in}, {&top});
  EXPECT_EQ(top.shape(), in.shape());
  EXPECT_TRUE(across->blobs().empty());
}

TEST(LRNLayerTest, ForwardAcrossChannels) {
  Context ctx(Device::Cpu(), 1701);
  // 1 x 3 x 1 x 2: position 0 holds channels (1 2 3), position 1 holds (0 1 0).
  // local_size 3, alpha 3 (alpha / n = 1), beta 0.5, k 2:
  //   position 0: s = 2 + (1+4), 2 + (1+4+9), 2 + (4+9) = 7, 16, 15
  //               y = 1/sqrt(7), 2/4, 3/sqrt(15)
  //   position 1: s = 3, 3, 3; y = 0, 1/sqrt(3), 0
  Tensor in({1, 3, 1, 2}), top;
  SetData(&in, {1, 0, 2, 1, 3, 0});
  auto layer = CreateLayer(
      testing::LayerParam(
          "name: 'norm' type: 'LRN' lrn_param { local_size: 3 alpha: 3 beta: 0.5 k: 2 }"),
      &ctx);
  layer->Initialize({&in}, {&top});
  layer->Forward({&in}, {&top});
  ExpectNear(top, {0.377964f, 0, 0.5f, 0.577350f, 0.774597f, 0}, 1e-5f);
}

TEST(LRNLayerTest, ForwardWithinChannel) {
  Context ctx(Device::Cpu(), 1701);
  // One 3 x 3 plane holding 1..9; local_size 3, alpha 9 (alpha / n^2 = 1), beta 0.5; k is
  // ignored within a channel (s = 1 + ...). s is 1 + the sum of squares in the 3 x 3 window
  // (cut at the border):
  //   (0,0): 1+4+16+25 = 46 -> 1/sqrt(47);  (0,1): 1+4+9+16+25+36 = 91 -> 2/sqrt(92)
  //   (1,1): all, 285 -> 5/sqrt(286);       (2,2): 25+36+64+81 = 206 -> 9/sqrt(207)
  Tensor in({1, 1, 3, 3}), top;
  SetData(&in, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto layer =
      CreateLayer(testing::LayerParam("name: 'norm' type: 'LRN' lrn_param { local_size: 3 alpha: 9 "
                                      "beta: 0.5 k: 5 norm_region: WITHIN_CHANNEL }"),
                  &ctx);
  layer->Initialize({&in}, {&top});
  layer->Forward({&in}, {&top});
  EXPECT_NEAR(top.data_at(0, 0, 0, 0), 0.145865f, 1e-5f);
  EXPECT_NEAR(top.data_at(0, 0, 0, 1), 0.208514f, 1e-5f);
  EXPECT_NEAR(top.data_at(0, 0, 1, 1), 0.295656f, 1e-5f);
  EXPECT_NEAR(top.data_at(0, 0, 2, 2), 0.625543f, 1e-5f);
}

void CheckGradient(const std::string& lrn_param, const std::vector<int>& shape) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in(shape), top;
  testing::FillGaussian(&in);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'norm' type: 'LRN' lrn_param { " + lrn_param + " }"), &ctx);
  testing::GradientCheckOptions options;
  options.threshold = 1e-2f;  // as Caffe's LRN test
  testing::GradientChecker(options).Check(layer.get(), {&in}, {&top});
}

TEST(LRNLayerTest, GradientAcrossChannelsDefaults) { CheckGradient("", {2, 7, 3, 3}); }

TEST(LRNLayerTest, GradientAcrossChannelsSize3) {
  CheckGradient("local_size: 3 alpha: 2 beta: 0.6 k: 1.5", {2, 4, 2, 3});
}

TEST(LRNLayerTest, GradientAcrossChannelsWindowWiderThanChannels) {
  CheckGradient("local_size: 7 alpha: 1.5", {1, 3, 2, 2});
}

TEST(LRNLayerTest, GradientWithinChannel) {
  CheckGradient("local_size: 3 alpha: 2 norm_region: WITHIN_CHANNEL", {2, 2, 4, 5});
}

TEST(LRNLayerTest, GradientWithinChannelWindowWiderThanImage) {
  CheckGradient("local_size: 5 beta: 0.9 norm_region: WITHIN_CHANNEL", {1, 2, 3, 3});
}

TEST(LRNLayerTest, EvenLocalSizeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({1, 3, 2, 2}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'norm' type: 'LRN' lrn_param { local_size: 4 }"), &ctx);
  try {
    layer->Initialize({&in}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'norm'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("local_size"), std::string::npos) << msg;
  }
}

TEST(LRNLayerTest, NonFourAxisBottomIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({3, 2, 2}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'norm' type: 'LRN'"), &ctx);
  try {
    layer->Initialize({&in}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'norm'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3 2 2 (12)"), std::string::npos) << msg;
  }
}

TEST(LRNLayerTest, InPlaceIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor in({1, 3, 2, 2});
  auto layer = CreateLayer(testing::LayerParam("name: 'norm' type: 'LRN'"), &ctx);
  EXPECT_THROW(layer->Initialize({&in}, {&in}), Error);
}

}  // namespace
}  // namespace cortado
