// SPDX-License-Identifier: Apache-2.0
#include "layers/threshold_layer.hpp"

#include <gtest/gtest.h>

#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

TEST(ThresholdLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'thr' type: 'Threshold'"), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(ThresholdLayerTest, DefaultThresholdIsZeroAndStrict) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'thr' type: 'Threshold'"), &ctx);
  Tensor bottom({5}), top;
  testing::SetData(&bottom, {-1.0f, 0.0f, 1e-6f, 0.5f, 2.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // 1 only where x > 0: x == 0 gives 0.
  EXPECT_EQ(Data(top), (std::vector<float>{0.0f, 0.0f, 1.0f, 1.0f, 1.0f}));
}

TEST(ThresholdLayerTest, GivenThreshold) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      LayerParam("name: 'thr' type: 'Threshold' threshold_param { threshold: 0.5 }"), &ctx);
  Tensor bottom({2, 3}), top;
  testing::SetData(&bottom, {-1.0f, 0.0f, 0.49f, 0.5f, 0.51f, 7.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f}));
}

TEST(ThresholdLayerTest, InPlace) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      LayerParam("name: 'thr' type: 'Threshold' threshold_param { threshold: -0.25 }"), &ctx);
  Tensor bottom({4});
  testing::SetData(&bottom, {-1.0f, -0.25f, -0.2f, 3.0f});
  layer->Initialize({&bottom}, {&bottom});
  layer->Forward({&bottom}, {&bottom});
  EXPECT_EQ(Data(bottom), (std::vector<float>{0.0f, 0.0f, 1.0f, 1.0f}));
}

// Caffe's Backward is NOT_IMPLEMENTED: asking for the gradient is an error naming the layer.
TEST(ThresholdLayerTest, BackwardWithPropagateDownIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'thr' type: 'Threshold'"), &ctx);
  Tensor bottom({3}), top;
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  try {
    layer->Backward({&top}, {true}, {&bottom});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'thr' (Threshold)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("propagate_down"), std::string::npos) << msg;
  }
}

TEST(ThresholdLayerTest, BackwardWithoutPropagateDownLeavesTheDiff) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'thr' type: 'Threshold'"), &ctx);
  Tensor bottom({3}), top;
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  testing::SetData(&top, {1.0f, 2.0f, 3.0f});
  std::copy_n(top.cpu_data(), 3, top.mutable_cpu_diff());
  std::fill_n(bottom.mutable_cpu_diff(), 3, 7.0f);
  layer->Backward({&top}, {false}, {&bottom});
  EXPECT_EQ(Diff(bottom), (std::vector<float>{7.0f, 7.0f, 7.0f}));
}

TEST(ThresholdLayerTest, TwoBottomsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'thr' type: 'Threshold'"), &ctx);
  Tensor a({3}), b({3}), top;
  try {
    layer->Initialize({&a, &b}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'thr' (Threshold)"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace cortado
