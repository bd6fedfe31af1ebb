// SPDX-License-Identifier: Apache-2.0
#include "layers/bnll_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

TEST(BNLLLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'bnll' type: 'BNLL'"), &ctx);
  Tensor bottom({2, 3, 4, 5}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(BNLLLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'bnll' type: 'BNLL'"), &ctx);
  const float ln3 = std::log(3.0f);
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {0.0f, ln3, -ln3});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // log(1 + e^x): log 2; log(1 + 3) = log 4; log(1 + 1/3) = log(4/3)
  const std::vector<float> expected = {std::log(2.0f), std::log(4.0f), std::log(4.0f / 3.0f)};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
  std::fill_n(top.mutable_cpu_diff(), 3, 2.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // 2 * sigmoid(x): 2 * 1/2, 2 * 3/4, 2 * 1/4
  const std::vector<float> expected_diff = {1.0f, 1.5f, 0.5f};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(bottom.cpu_diff()[i], expected_diff[i], 1e-6f) << i;
}

// Large |x| neither overflows forward (exp(100) is inf in float) nor in the gradient, where
// Caffe clamps the exponent at 50 (exp(200) / (exp(200) + 1) would be inf / inf).
TEST(BNLLLayerTest, LargeInputsStayFinite) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'bnll' type: 'BNLL'"), &ctx);
  Tensor bottom({4}), top;
  testing::SetData(&bottom, {100.0f, 200.0f, -100.0f, -200.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_FLOAT_EQ(top.cpu_data()[0], 100.0f);
  EXPECT_FLOAT_EQ(top.cpu_data()[1], 200.0f);
  EXPECT_GE(top.cpu_data()[2], 0.0f);
  EXPECT_LT(top.cpu_data()[2], 1e-30f);
  EXPECT_EQ(top.cpu_data()[3], 0.0f);
  std::fill_n(top.mutable_cpu_diff(), 4, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_FLOAT_EQ(bottom.cpu_diff()[0], 1.0f);
  EXPECT_FLOAT_EQ(bottom.cpu_diff()[1], 1.0f);
  EXPECT_LT(bottom.cpu_diff()[2], 1e-30f);
  EXPECT_EQ(bottom.cpu_diff()[3], 0.0f);
  for (float v : Diff(bottom)) EXPECT_TRUE(std::isfinite(v));
}

TEST(BNLLLayerTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'bnll' type: 'BNLL'"), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom, 0.0f, 2.0f);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST(BNLLLayerTest, InPlaceMatchesSeparateTop) {
  Tensor input({2, 3, 4});
  testing::FillGaussian(&input, 0.0f, 2.0f);
  testing::ExpectInPlaceMatches("name: 'bnll' type: 'BNLL'", input);
}

TEST(BNLLLayerTest, NoTopIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'bnll' type: 'BNLL'"), &ctx);
  Tensor bottom({3});
  try {
    layer->Initialize({&bottom}, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'bnll' (BNLL)"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace cortado
