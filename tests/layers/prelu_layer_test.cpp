// SPDX-License-Identifier: Apache-2.0
#include "layers/prelu_layer.hpp"

#include <gtest/gtest.h>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

TEST(PReLULayerTest, ShapesAndDefaultSlopes) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'prelu' type: 'PReLU'"), &ctx);
  Tensor bottom({2, 3, 4, 5}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
  ASSERT_EQ(layer->blobs().size(), 1u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{3}));  // one slope per channel
  EXPECT_EQ(Data(*layer->blobs()[0]), (std::vector<float>{0.25f, 0.25f, 0.25f}));
}

TEST(PReLULayerTest, SharedSlopeIsAScalarBlob) {
  Context ctx(Device::Cpu(), 1701);
  auto layer =
      CreateLayer(LayerParam("name: 'prelu' type: 'PReLU' prelu_param { channel_shared: true "
                             "filler { type: 'constant' value: 0.7 } }"),
                  &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  ASSERT_EQ(layer->blobs().size(), 1u);
  // Caffe saves a shared slope as a 0-axis blob holding one value.
  EXPECT_EQ(layer->blobs()[0]->num_axes(), 0);
  EXPECT_EQ(layer->blobs()[0]->count(), 1);
  EXPECT_FLOAT_EQ(layer->blobs()[0]->cpu_data()[0], 0.7f);
}

TEST(PReLULayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'prelu' type: 'PReLU'"), &ctx);
  Tensor bottom({1, 2, 3}), top;
  // channel 0: -1, 2, -4; channel 1: 3, -2, 0
  testing::SetData(&bottom, {-1.0f, 2.0f, -4.0f, 3.0f, -2.0f, 0.0f});
  layer->Initialize({&bottom}, {&top});
  testing::SetData(layer->blobs()[0].get(), {0.25f, 0.5f});
  layer->Forward({&bottom}, {&top});
  // x for x > 0, slope_c * x otherwise
  EXPECT_EQ(Data(top), (std::vector<float>{-0.25f, 2.0f, -1.0f, 3.0f, -1.0f, 0.0f}));

  std::fill_n(top.mutable_cpu_diff(), 6, 1.0f);
  std::fill_n(layer->blobs()[0]->mutable_cpu_diff(), 2, 0.0f);
  layer->Backward({&top}, {true}, {&bottom});
  // dx = 1 for x > 0, slope_c for x <= 0 (x == 0 takes the slope, as Caffe)
  EXPECT_EQ(Diff(bottom), (std::vector<float>{0.25f, 1.0f, 0.25f, 1.0f, 0.5f, 0.5f}));
  // dslope_c = sum of dy * x over x <= 0: channel 0: -1 + -4; channel 1: -2 + 0
  EXPECT_EQ(Diff(*layer->blobs()[0]), (std::vector<float>{-5.0f, -2.0f}));

  // Parameter gradients accumulate; the bottom diff is overwritten.
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_EQ(Diff(*layer->blobs()[0]), (std::vector<float>{-10.0f, -4.0f}));
  EXPECT_EQ(Diff(bottom), (std::vector<float>{0.25f, 1.0f, 0.25f, 1.0f, 0.5f, 0.5f}));
}

TEST(PReLULayerTest, SharedSlopeGradientSumsAllChannels) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      LayerParam("name: 'prelu' type: 'PReLU' prelu_param { channel_shared: true }"), &ctx);
  Tensor bottom({1, 2, 3}), top;
  testing::SetData(&bottom, {-1.0f, 2.0f, -4.0f, 3.0f, -2.0f, 0.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // every channel uses the default slope 0.25
  EXPECT_EQ(Data(top), (std::vector<float>{-0.25f, 2.0f, -1.0f, 3.0f, -0.5f, 0.0f}));
  std::fill_n(top.mutable_cpu_diff(), 6, 1.0f);
  layer->blobs()[0]->mutable_cpu_diff()[0] = 0.0f;
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_FLOAT_EQ(layer->blobs()[0]->cpu_diff()[0], -7.0f);  // -1 - 4 - 2 + 0
}

class PReLUSharedTest : public ::testing::TestWithParam<bool> {
 protected:
  std::string Text() const {
    return fmt::format(
        "name: 'prelu' type: 'PReLU' prelu_param {{ channel_shared: {} "
        "filler {{ type: 'uniform' min: 0.1 max: 0.6 }} }}",
        GetParam() ? "true" : "false");
  }
};

TEST_P(PReLUSharedTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(Text()), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillAwayFromZero(&bottom, 0.1f, 1.5f);  // off the kink at 0
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST_P(PReLUSharedTest, InPlaceMatchesSeparateTop) {
  Tensor input({2, 3, 2, 2});
  testing::FillGaussian(&input);
  testing::ExpectInPlaceMatches(Text(), input);
}

INSTANTIATE_TEST_SUITE_P(ChannelShared, PReLUSharedTest, ::testing::Bool());

TEST(PReLULayerTest, OneAxisBottomIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      LayerParam("name: 'prelu' type: 'PReLU' prelu_param { channel_shared: false }"), &ctx);
  Tensor bottom({6}), top;
  try {
    layer->Initialize({&bottom}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'prelu'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("6 (6)"), std::string::npos) << msg;
  }
}

TEST(PReLULayerTest, SlopeCountNotMatchingChannelsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'prelu' type: 'PReLU'"), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  bottom.Reshape({2, 5, 4});  // 5 channels, 3 slopes
  try {
    layer->Reshape({&bottom}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("3 (3)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 5 4 (40)"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace cortado
