// SPDX-License-Identifier: Apache-2.0
#include "layers/parameter_layer.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

constexpr const char* kParamText =
    "name: 'param' type: 'Parameter' parameter_param { shape { dim: 2 dim: 3 } }";

void ExpectInitializeError(Layer* layer, const std::vector<Tensor*>& bottom,
                           const std::string& needle) {
  Tensor top;
  try {
    layer->Initialize(bottom, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'param' (Parameter)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(ParameterLayerTest, BlobAndTopHaveTheParamShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kParamText), &ctx);
  Tensor top;
  layer->Initialize({}, {&top});
  ASSERT_EQ(layer->blobs().size(), 1u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{2, 3}));
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 3}));
  EXPECT_EQ(Data(*layer->blobs()[0]), std::vector<float>(6, 0.0f));  // no filler: zeros
}

TEST(ParameterLayerTest, NoShapeIsAScalar) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'param' type: 'Parameter'"), &ctx);
  Tensor top;
  layer->Initialize({}, {&top});
  EXPECT_EQ(layer->blobs()[0]->num_axes(), 0);
  EXPECT_EQ(top.num_axes(), 0);
  EXPECT_EQ(top.count(), 1);
}

TEST(ParameterLayerTest, ForwardOutputsTheBlobAndBackwardAddsTheDiff) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kParamText), &ctx);
  Tensor top;
  layer->Initialize({}, {&top});
  testing::SetData(layer->blobs()[0].get(), {1, -2, 3, -4, 5, -6});
  layer->Forward({}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{1, -2, 3, -4, 5, -6}));

  const std::vector<float> dy = {0.5f, 1, 2, 4, 8, 16};
  std::copy(dy.begin(), dy.end(), top.mutable_cpu_diff());
  std::fill_n(layer->blobs()[0]->mutable_cpu_diff(), 6, 0.0f);
  layer->Backward({&top}, {}, {});
  EXPECT_EQ(Diff(*layer->blobs()[0]), dy);
  // Parameter gradients accumulate until the net clears them.
  layer->Backward({&top}, {}, {});
  EXPECT_EQ(Diff(*layer->blobs()[0]), (std::vector<float>{1, 2, 4, 8, 16, 32}));
}

TEST(ParameterLayerTest, FrozenBlobGetsNoGradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kParamText), &ctx);
  Tensor top;
  layer->Initialize({}, {&top});
  layer->set_param_propagate_down(0, false);
  std::fill_n(top.mutable_cpu_diff(), 6, 1.0f);
  std::fill_n(layer->blobs()[0]->mutable_cpu_diff(), 6, 0.0f);
  layer->Backward({&top}, {}, {});
  EXPECT_EQ(Diff(*layer->blobs()[0]), std::vector<float>(6, 0.0f));
}

TEST(ParameterLayerTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kParamText), &ctx);
  Tensor top;
  layer->Initialize({}, {&top});
  testing::FillGaussian(layer->blobs()[0].get());
  testing::GradientChecker().Check(layer.get(), {}, {&top});
}

// A blob already there (loaded or shared) is kept, not re-initialised.
TEST(ParameterLayerTest, ExistingBlobIsKept) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kParamText), &ctx);
  auto blob = std::make_shared<Tensor>(std::vector<int>{2, 3});
  testing::SetData(blob.get(), {6, 5, 4, 3, 2, 1});
  layer->blobs().push_back(blob);
  Tensor top;
  layer->Initialize({}, {&top});
  EXPECT_EQ(layer->blobs()[0], blob);
  layer->Forward({}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{6, 5, 4, 3, 2, 1}));
}

TEST(ParameterLayerTest, ExistingBlobOfAnotherShapeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kParamText), &ctx);
  layer->blobs().push_back(std::make_shared<Tensor>(std::vector<int>{6}));
  ExpectInitializeError(layer.get(), {}, "6 (6)");
}

TEST(ParameterLayerTest, NegativeDimensionIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      LayerParam("name: 'param' type: 'Parameter' parameter_param { shape { dim: 2 dim: -3 } }"),
      &ctx);
  ExpectInitializeError(layer.get(), {}, "[2 -3]");
}

TEST(ParameterLayerTest, BottomIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(kParamText), &ctx);
  Tensor bottom({2, 3});
  ExpectInitializeError(layer.get(), {&bottom}, "0 bottom");
}

}  // namespace
}  // namespace cortado
