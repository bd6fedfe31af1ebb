// SPDX-License-Identifier: Apache-2.0
#include "layers/clip_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

std::string ClipText(float min, float max) {
  return fmt::format("name: 'clip' type: 'Clip' clip_param {{ min: {} max: {} }}", min, max);
}

void ExpectSetupError(const std::string& text, const std::string& needle) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(text), &ctx);
  Tensor bottom({2, 3}), top;
  try {
    layer->Initialize({&bottom}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'clip' (Clip)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(ClipLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(ClipText(-1.0f, 1.0f)), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(ClipLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(ClipText(-1.0f, 2.0f)), &ctx);
  Tensor bottom({6}), top;
  testing::SetData(&bottom, {-3.0f, -1.0f, 0.5f, 2.0f, 2.001f, 5.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{-1.0f, -1.0f, 0.5f, 2.0f, 2.0f, 2.0f}));
  testing::SetData(&top, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f});
  std::copy_n(top.cpu_data(), 6, top.mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  // The gradient passes where min <= x <= max: both ends included, as Caffe.
  EXPECT_EQ(Diff(bottom), (std::vector<float>{0.0f, 2.0f, 3.0f, 4.0f, 0.0f, 0.0f}));
}

TEST(ClipLayerTest, EqualBoundsGiveAConstant) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(ClipText(0.5f, 0.5f)), &ctx);
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {-1.0f, 0.5f, 1.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{0.5f, 0.5f, 0.5f}));
  std::fill_n(top.mutable_cpu_diff(), 3, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_EQ(Diff(bottom), (std::vector<float>{0.0f, 1.0f, 0.0f}));
}

TEST(ClipLayerTest, NanStaysNan) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(ClipText(-1.0f, 1.0f)), &ctx);
  Tensor bottom({1}), top;
  bottom.mutable_cpu_data()[0] = std::numeric_limits<float>::quiet_NaN();
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_TRUE(std::isnan(top.cpu_data()[0]));
}

TEST(ClipLayerTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(ClipText(-1.0f, 1.0f)), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom, 0.0f, 1.5f);
  testing::GradientCheckOptions options;
  options.kink = 1.0f;  // the derivative jumps at -1 and 1
  options.kink_range = 0.02f;
  testing::GradientChecker(options).Check(layer.get(), {&bottom}, {&top});
}

TEST(ClipLayerTest, InPlaceMatchesSeparateTop) {
  Tensor input({2, 3, 4});
  testing::FillGaussian(&input, 0.0f, 1.5f);
  testing::ExpectInPlaceMatches(ClipText(-0.5f, 1.0f), input);
}

TEST(ClipLayerTest, MissingBoundsAreAnError) {
  ExpectSetupError("name: 'clip' type: 'Clip'", "clip_param.min and clip_param.max");
}

TEST(ClipLayerTest, MinAboveMaxIsAnError) { ExpectSetupError(ClipText(2.0f, 1.0f), "2"); }

}  // namespace
}  // namespace cortado
