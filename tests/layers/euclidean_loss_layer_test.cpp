// SPDX-License-Identifier: Apache-2.0
#include "layers/euclidean_loss_layer.hpp"

#include <gtest/gtest.h>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> MakeLoss(Context* ctx, const std::string& extra = "") {
  return CreateLayer(
      testing::LayerParam("name: 'l2' type: 'EuclideanLoss' bottom: 'a' bottom: 'b' " + extra),
      ctx);
}

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(t->count(), static_cast<int>(values.size()));
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

TEST(EuclideanLossLayerTest, LossTopIsAScalar) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor a({4, 3, 2}), b({4, 6}), loss;  // same count per sample is enough
  layer->Initialize({&a, &b}, {&loss});
  EXPECT_EQ(loss.num_axes(), 0);
  EXPECT_EQ(loss.count(), 1);
  EXPECT_EQ(layer->loss(0), 1.0f);
  EXPECT_TRUE(layer->AllowForceBackward(1));
}

TEST(EuclideanLossLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  // a - b = (1, 0, 2, 3); sum of squares 14; N = 2; loss = 14 / (2 * 2) = 3.5.
  // da = (a - b) / N = (0.5, 0, 1, 1.5), db = -da.
  Tensor a({2, 2}), b({2, 2}), loss;
  SetData(&a, {1, 2, 3, 4});
  SetData(&b, {0, 2, 1, 1});
  layer->Initialize({&a, &b}, {&loss});
  EXPECT_FLOAT_EQ(layer->Forward({&a, &b}, {&loss}), 3.5f);
  EXPECT_FLOAT_EQ(loss.cpu_data()[0], 3.5f);
  layer->Backward({&loss}, {true, true}, {&a, &b});
  const float expected[] = {0.5f, 0.0f, 1.0f, 1.5f};
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(a.cpu_diff()[i], expected[i]);
    EXPECT_FLOAT_EQ(b.cpu_diff()[i], -expected[i]);
  }
}

TEST(EuclideanLossLayerTest, GradientBothBottoms) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor a({3, 2, 2}), b({3, 2, 2}), loss;
  testing::FillGaussian(&a, 0.0f, 1.0f, 1);
  testing::FillGaussian(&b, 0.0f, 1.0f, 2);
  testing::GradientChecker().Check(layer.get(), {&a, &b}, {&loss});
}

TEST(EuclideanLossLayerTest, LossTopDiffScalesGradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor a({2, 3}), b({2, 3}), loss;
  testing::FillGaussian(&a, 0.0f, 1.0f, 1);
  testing::FillGaussian(&b, 0.0f, 1.0f, 2);
  layer->Initialize({&a, &b}, {&loss});
  layer->Forward({&a, &b}, {&loss});
  layer->Backward({&loss}, {true, true}, {&a, &b});
  std::vector<float> da(a.cpu_diff(), a.cpu_diff() + 6), db(b.cpu_diff(), b.cpu_diff() + 6);
  loss.mutable_cpu_diff()[0] = 2.0f;
  layer->Backward({&loss}, {true, true}, {&a, &b});
  for (int i = 0; i < 6; ++i) {
    EXPECT_FLOAT_EQ(a.cpu_diff()[i], 2 * da[i]);
    EXPECT_FLOAT_EQ(b.cpu_diff()[i], 2 * db[i]);
  }
}

TEST(EuclideanLossLayerTest, LossWeightParamScalesLoss) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_weight: 2");
  Tensor a({2, 2}), b({2, 2}), loss;
  SetData(&a, {1, 2, 3, 4});
  SetData(&b, {0, 2, 1, 1});
  layer->Initialize({&a, &b}, {&loss});
  EXPECT_FLOAT_EQ(layer->Forward({&a, &b}, {&loss}), 7.0f);
  layer->Backward({&loss}, {true, false}, {&a, &b});
  EXPECT_FLOAT_EQ(a.cpu_diff()[3], 3.0f);
}

TEST(EuclideanLossLayerTest, OnlyRequestedBottomGetsGradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor a({2, 2}), b({2, 2}), loss;
  SetData(&a, {1, 2, 3, 4});
  SetData(&b, {0, 2, 1, 1});
  layer->Initialize({&a, &b}, {&loss});
  layer->Forward({&a, &b}, {&loss});
  b.mutable_cpu_diff()[0] = 42.0f;
  layer->Backward({&loss}, {true, false}, {&a, &b});
  EXPECT_EQ(b.cpu_diff()[0], 42.0f);
}

TEST(EuclideanLossLayerTest, MismatchedShapesAreAnError) {
  Context ctx(Device::Cpu(), 1701);
  {
    auto layer = MakeLoss(&ctx);
    Tensor a({2, 3}), b({2, 4}), loss;
    try {
      layer->Initialize({&a, &b}, {&loss});
      FAIL() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'l2'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("2 4 (8)"), std::string::npos) << msg;
    }
  }
  {
    auto layer = MakeLoss(&ctx);
    Tensor a({2, 3}), b({3, 2}), loss;  // same count, different N
    EXPECT_THROW(layer->Initialize({&a, &b}, {&loss}), Error);
  }
  {
    auto layer = MakeLoss(&ctx);
    Tensor a({0, 3}), b({0, 3}), loss;  // no sample: the mean would be 0 / 0
    try {
      layer->Initialize({&a, &b}, {&loss});
      FAIL() << "an empty batch was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("hold no sample"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cortado
