// SPDX-License-Identifier: Apache-2.0
#include "layers/dropout_layer.hpp"

#include <gtest/gtest.h>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

std::string DropoutText(const char* phase, float ratio, bool scale_train = true) {
  return fmt::format(
      "name: 'drop' type: 'Dropout' phase: {} dropout_param {{ dropout_ratio: {} "
      "scale_train: {} }}",
      phase, ratio, scale_train ? "true" : "false");
}

TEST(DropoutLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'drop' type: 'Dropout'"), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(DropoutLayerTest, TestPhaseIsIdentity) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(DropoutText("TEST", 0.5f)), &ctx);
  Tensor bottom({2, 3, 4}), top;
  testing::FillGaussian(&bottom);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_EQ(Data(top), Data(bottom));
  testing::FillGaussian(&top, 0.0f, 1.0f, 5);
  std::copy(top.cpu_data(), top.cpu_data() + top.count(), top.mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_EQ(Diff(bottom), Diff(top));
}

// Train phase: each element is dropped with probability 0.3, and kept ones become 1 / 0.7.
TEST(DropoutLayerTest, TrainPhaseDropsAboutRatioAndScalesTheRest) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(DropoutText("TRAIN", 0.3f)), &ctx);
  Tensor bottom({10, 10, 100}), top;
  std::fill_n(bottom.mutable_cpu_data(), bottom.count(), 1.0f);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  int dropped = 0;
  const float kept_value = 1.0f / 0.7f;
  for (int i = 0; i < top.count(); ++i) {
    const float y = top.cpu_data()[i];
    if (y == 0.0f) {
      ++dropped;
    } else {
      EXPECT_FLOAT_EQ(y, kept_value) << i;
    }
  }
  // 10000 Bernoulli draws: the standard deviation of the fraction is about 0.005.
  EXPECT_NEAR(dropped / 10000.0, 0.3, 0.02);

  // Backward uses the same mask: dy / 0.7 where kept, 0 where dropped.
  std::fill_n(top.mutable_cpu_diff(), top.count(), 2.0f);
  layer->Backward({&top}, {true}, {&bottom});
  for (int i = 0; i < top.count(); ++i) {
    const float expected = top.cpu_data()[i] == 0.0f ? 0.0f : 2.0f * kept_value;
    ASSERT_FLOAT_EQ(bottom.cpu_diff()[i], expected) << i;
  }
}

TEST(DropoutLayerTest, SameSeedGivesSameMaskAndNewDrawsDiffer) {
  Tensor bottom({1000}), top_a, top_b;
  std::fill_n(bottom.mutable_cpu_data(), bottom.count(), 1.0f);
  Context ctx_a(Device::Cpu(), 99), ctx_b(Device::Cpu(), 99);
  auto a = CreateLayer(LayerParam(DropoutText("TRAIN", 0.5f)), &ctx_a);
  auto b = CreateLayer(LayerParam(DropoutText("TRAIN", 0.5f)), &ctx_b);
  a->Initialize({&bottom}, {&top_a});
  b->Initialize({&bottom}, {&top_b});
  a->Forward({&bottom}, {&top_a});
  b->Forward({&bottom}, {&top_b});
  EXPECT_EQ(Data(top_a), Data(top_b));
  const std::vector<float> first = Data(top_a);
  a->Forward({&bottom}, {&top_a});
  EXPECT_NE(Data(top_a), first);  // a fresh mask each iteration
}

// scale_train: false (NVIDIA Caffe) keeps train values unscaled and scales at test time.
TEST(DropoutLayerTest, ScaleTrainFalseScalesAtTestTime) {
  Tensor bottom({1000}), top;
  std::fill_n(bottom.mutable_cpu_data(), bottom.count(), 2.0f);
  {
    Context ctx(Device::Cpu(), 1701);
    auto train = CreateLayer(LayerParam(DropoutText("TRAIN", 0.25f, false)), &ctx);
    train->Initialize({&bottom}, {&top});
    train->Forward({&bottom}, {&top});
    for (int i = 0; i < top.count(); ++i) {
      const float y = top.cpu_data()[i];
      EXPECT_TRUE(y == 0.0f || y == 2.0f) << i << ": " << y;
    }
  }
  Context ctx(Device::Cpu(), 1701);
  auto test = CreateLayer(LayerParam(DropoutText("TEST", 0.25f, false)), &ctx);
  test->Initialize({&bottom}, {&top});
  test->Forward({&bottom}, {&top});
  for (int i = 0; i < top.count(); ++i) ASSERT_FLOAT_EQ(top.cpu_data()[i], 1.5f) << i;
  std::fill_n(top.mutable_cpu_diff(), top.count(), 1.0f);
  test->Backward({&top}, {true}, {&bottom});
  for (int i = 0; i < top.count(); ++i) ASSERT_FLOAT_EQ(bottom.cpu_diff()[i], 0.75f) << i;
}

TEST(DropoutLayerTest, TrainGradientMatchesNumeric) {
  // The checker reseeds the context before every forward, so every pass draws the same mask.
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(DropoutText("TRAIN", 0.4f)), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST(DropoutLayerTest, TestGradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(DropoutText("TEST", 0.4f)), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillGaussian(&bottom);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST(DropoutLayerTest, InPlaceMatchesSeparateTop) {
  Tensor input({4, 5, 6});
  testing::FillGaussian(&input);
  testing::ExpectInPlaceMatches(DropoutText("TRAIN", 0.5f), input);
  testing::ExpectInPlaceMatches(DropoutText("TEST", 0.5f), input);
}

TEST(DropoutLayerTest, RatioOutsideZeroToOneIsAnError) {
  for (float ratio : {1.0f, -0.1f, 1.5f}) {
    Context ctx(Device::Cpu(), 1701);
    auto layer = CreateLayer(LayerParam(DropoutText("TRAIN", ratio)), &ctx);
    Tensor bottom({3}), top;
    try {
      layer->Initialize({&bottom}, {&top});
      ADD_FAILURE() << "no error for ratio " << ratio;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("dropout_ratio"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cortado
