// SPDX-License-Identifier: Apache-2.0
#include "layers/silence_layer.hpp"

#include <gtest/gtest.h>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> MakeSilence(Context* ctx) {
  return CreateLayer(testing::LayerParam("name: 'quiet' type: 'Silence' bottom: 'a'"), ctx);
}

TEST(SilenceLayerTest, TakesBottomsAndNoTops) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSilence(&ctx);
  Tensor a({2, 3}), b({4});
  testing::FillGaussian(&a);
  layer->Initialize({&a, &b}, {});
  EXPECT_EQ(layer->Forward({&a, &b}, {}), 0.0f);
  EXPECT_EQ(a.shape(), (std::vector<int>{2, 3}));  // untouched
}

TEST(SilenceLayerTest, BackwardZeroesRequestedDiffs) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSilence(&ctx);
  Tensor a({2, 3}), b({4});
  layer->Initialize({&a, &b}, {});
  for (int i = 0; i < a.count(); ++i) a.mutable_cpu_diff()[i] = 5.0f;
  for (int i = 0; i < b.count(); ++i) b.mutable_cpu_diff()[i] = 5.0f;
  layer->Backward({}, {true, false}, {&a, &b});
  EXPECT_EQ(a.asum_diff(), 0.0f);
  EXPECT_EQ(b.asum_diff(), 20.0f);  // not asked for, left alone
}

TEST(SilenceLayerTest, GradientIsZero) {
  // The objective has no terms (no tops), so the numeric gradient is 0 as well.
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSilence(&ctx);
  Tensor a({2, 2});
  testing::FillGaussian(&a);
  testing::GradientChecker().Check(layer.get(), {&a}, {});
}

TEST(SilenceLayerTest, BlobCountErrors) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeSilence(&ctx);
  Tensor a({2}), top;
  EXPECT_THROW(layer->Initialize({}, {}), Error);
  auto layer2 = MakeSilence(&ctx);
  EXPECT_THROW(layer2->Initialize({&a}, {&top}), Error);
}

}  // namespace
}  // namespace cortado
