// SPDX-License-Identifier: Apache-2.0
#include "layers/softmax_with_loss_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> MakeLoss(Context* ctx, const std::string& extra = "") {
  return CreateLayer(
      testing::LayerParam("name: 'loss' type: 'SoftmaxWithLoss' bottom: 'score' bottom: 'label' " +
                          extra),
      ctx);
}

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(t->count(), static_cast<int>(values.size()));
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

// Scores of shape 2 x 3 x 2 (N x classes x positions) and labels of shape 2 x 2:
//   sample 0, position 0: scores (1, 2, 3),  label 2: -log(e^3 / (e^1 + e^2 + e^3)) = 0.4076060
//   sample 0, position 1: scores (1, 1, 1),  label 0: -log(1/3)                      = 1.0986123
//   sample 1, position 0: scores (2, 0, 0),  label 1: -log(1 / (e^2 + 2))            = 2.2395448
//   sample 1, position 1: scores (5, 0, -5), label -1 (ignored when ignore_label is -1)
// The sum over the three counted positions is 3.7457630.
constexpr float kSum = 3.7457630f;

struct HandCase {
  Tensor score{std::vector<int>{2, 3, 2}};
  Tensor label{std::vector<int>{2, 2}};
  HandCase() {
    SetData(&score, {1, 1, 2, 1, 3, 1, /* sample 1 */ 2, 5, 0, 0, 0, -5});
    SetData(&label, {2, 0, 1, -1});
  }
};

float ForwardLoss(const std::string& extra) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, extra);
  HandCase c;
  Tensor loss;
  layer->Initialize({&c.score, &c.label}, {&loss});
  const float weighted = layer->Forward({&c.score, &c.label}, {&loss});
  EXPECT_FLOAT_EQ(weighted, loss.cpu_data()[0]);  // default loss_weight 1
  return loss.cpu_data()[0];
}

TEST(SoftmaxWithLossLayerTest, LossTopIsAScalar) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor score({2, 5, 3}), label({2, 3}), loss, prob;
  layer->Initialize({&score, &label}, {&loss, &prob});
  EXPECT_EQ(loss.num_axes(), 0);
  EXPECT_EQ(loss.count(), 1);
  EXPECT_EQ(prob.shape(), score.shape());
  EXPECT_TRUE(layer->AutoTopBlobs());
  EXPECT_FALSE(layer->AllowForceBackward(1));
  EXPECT_TRUE(layer->AllowForceBackward(0));
  // The loss top weighs 1 and the probabilities 0 by default.
  EXPECT_EQ(layer->loss(0), 1.0f);
  EXPECT_EQ(layer->loss(1), 0.0f);
}

TEST(SoftmaxWithLossLayerTest, ForwardEachNormalization) {
  const std::string ignore = "loss_param { ignore_label: -1 ";
  // 4 positions, 3 of them counted, batch of 2.
  EXPECT_NEAR(ForwardLoss(ignore + "normalization: FULL }"), kSum / 4, 1e-5f);
  EXPECT_NEAR(ForwardLoss(ignore + "normalization: VALID }"), kSum / 3, 1e-5f);
  EXPECT_NEAR(ForwardLoss(ignore + "}"), kSum / 3, 1e-5f);  // VALID is the default
  EXPECT_NEAR(ForwardLoss(ignore + "normalization: BATCH_SIZE }"), kSum / 2, 1e-5f);
  EXPECT_NEAR(ForwardLoss(ignore + "normalization: NONE }"), kSum, 1e-5f);
}

TEST(SoftmaxWithLossLayerTest, LegacyNormalizeFlag) {
  const std::string ignore = "loss_param { ignore_label: -1 ";
  EXPECT_NEAR(ForwardLoss(ignore + "normalize: false }"), kSum / 2, 1e-5f);  // BATCH_SIZE
  EXPECT_NEAR(ForwardLoss(ignore + "normalize: true }"), kSum / 3, 1e-5f);   // VALID
  // An explicit normalization wins over the legacy flag.
  EXPECT_NEAR(ForwardLoss(ignore + "normalize: true normalization: NONE }"), kSum, 1e-5f);
}

TEST(SoftmaxWithLossLayerTest, LabelsAreTruncatedToInt) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_param { ignore_label: -1 normalization: NONE }");
  HandCase c;
  SetData(&c.label, {2.9f, 0.2f, 1.5f, -1.0f});
  Tensor loss;
  layer->Initialize({&c.score, &c.label}, {&loss});
  layer->Forward({&c.score, &c.label}, {&loss});
  EXPECT_NEAR(loss.cpu_data()[0], kSum, 1e-5f);
}

TEST(SoftmaxWithLossLayerTest, AllIgnoredGivesZeroNotNan) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_param { ignore_label: -1 }");
  HandCase c;
  SetData(&c.label, {-1, -1, -1, -1});
  Tensor loss;
  layer->Initialize({&c.score, &c.label}, {&loss});
  layer->Forward({&c.score, &c.label}, {&loss});
  EXPECT_EQ(loss.cpu_data()[0], 0.0f);  // 0 / max(1, 0)
  layer->Backward({&loss}, {true, false}, {&c.score, &c.label});
  EXPECT_EQ(c.score.asum_diff(), 0.0f);
}

TEST(SoftmaxWithLossLayerTest, SecondTopHoldsProbabilities) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_param { ignore_label: -1 }");
  HandCase c;
  Tensor loss, prob;
  layer->Initialize({&c.score, &c.label}, {&loss, &prob});
  const float weighted = layer->Forward({&c.score, &c.label}, {&loss, &prob});
  EXPECT_NEAR(weighted, kSum / 3, 1e-5f);  // the probabilities add nothing to the loss
  // Sample 0, position 0 is softmax(1, 2, 3); sample 1, position 1 sums to 1.
  EXPECT_NEAR(prob.cpu_data()[0], 0.0900306f, 1e-6f);
  EXPECT_NEAR(prob.cpu_data()[2], 0.2447285f, 1e-6f);
  EXPECT_NEAR(prob.cpu_data()[4], 0.6652410f, 1e-6f);
  EXPECT_NEAR(prob.cpu_data()[7] + prob.cpu_data()[9] + prob.cpu_data()[11], 1.0f, 1e-6f);
}

TEST(SoftmaxWithLossLayerTest, BackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_param { ignore_label: -1 }");
  HandCase c;
  Tensor loss;
  layer->Initialize({&c.score, &c.label}, {&loss});
  layer->Forward({&c.score, &c.label}, {&loss});
  layer->Backward({&loss}, {true, false}, {&c.score, &c.label});
  // (p - onehot(label)) / 3 at counted positions, 0 at the ignored one.
  const float* d = c.score.cpu_diff();
  EXPECT_NEAR(d[0], 0.0900306f / 3, 1e-6f);
  EXPECT_NEAR(d[2], 0.2447285f / 3, 1e-6f);
  EXPECT_NEAR(d[4], (0.6652410f - 1.0f) / 3, 1e-6f);
  EXPECT_NEAR(d[1], (1.0f / 3 - 1.0f) / 3, 1e-6f);
  EXPECT_EQ(d[7], 0.0f);
  EXPECT_EQ(d[9], 0.0f);
  EXPECT_EQ(d[11], 0.0f);
}

void RandomLabels(Tensor* label, int classes, unsigned seed) {
  std::mt19937 rng(seed);
  float* l = label->mutable_cpu_data();
  for (int i = 0; i < label->count(); ++i) l[i] = static_cast<float>(rng() % classes);
}

TEST(SoftmaxWithLossLayerTest, Gradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor score({2, 4, 2, 3}), label({2, 1, 2, 3}), loss;
  testing::FillGaussian(&score);
  RandomLabels(&label, 4, 3);
  testing::GradientCheckOptions options;
  options.check_bottoms = {0};
  testing::GradientChecker(options).Check(layer.get(), {&score, &label}, {&loss});
}

TEST(SoftmaxWithLossLayerTest, GradientIgnoreLabelEachNormalization) {
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    SCOPED_TRACE(mode);
    Context ctx(Device::Cpu(), 1701);
    auto layer =
        MakeLoss(&ctx, std::string("loss_param { ignore_label: 1 normalization: ") + mode + " }");
    Tensor score({2, 3, 4}), label({2, 4}), loss;
    testing::FillGaussian(&score, 0.0f, 1.0f, 5);
    RandomLabels(&label, 3, 9);
    label.mutable_cpu_data()[0] = 1.0f;  // at least one ignored position
    testing::GradientCheckOptions options;
    options.check_bottoms = {0};
    testing::GradientChecker(options).Check(layer.get(), {&score, &label}, {&loss});
  }
}

TEST(SoftmaxWithLossLayerTest, GradientAlongLastAxis) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "softmax_param { axis: -1 }");
  Tensor score({2, 3, 4}), label({2, 3}), loss;
  testing::FillGaussian(&score, 0.0f, 1.0f, 11);
  RandomLabels(&label, 4, 13);
  testing::GradientCheckOptions options;
  options.check_bottoms = {0};
  testing::GradientChecker(options).Check(layer.get(), {&score, &label}, {&loss});
}

TEST(SoftmaxWithLossLayerTest, LossTopDiffScalesGradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_param { ignore_label: -1 }");
  HandCase c;
  Tensor loss;
  layer->Initialize({&c.score, &c.label}, {&loss});
  layer->Forward({&c.score, &c.label}, {&loss});
  layer->Backward({&loss}, {true, false}, {&c.score, &c.label});
  std::vector<float> once(c.score.cpu_diff(), c.score.cpu_diff() + c.score.count());
  loss.mutable_cpu_diff()[0] = 2.0f;
  layer->Backward({&loss}, {true, false}, {&c.score, &c.label});
  for (int i = 0; i < c.score.count(); ++i) EXPECT_FLOAT_EQ(c.score.cpu_diff()[i], 2 * once[i]);
}

TEST(SoftmaxWithLossLayerTest, LossWeightParamScalesLossAndGradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_weight: 2 loss_param { ignore_label: -1 }");
  HandCase c;
  Tensor loss;
  layer->Initialize({&c.score, &c.label}, {&loss});
  EXPECT_NEAR(layer->Forward({&c.score, &c.label}, {&loss}), 2 * kSum / 3, 1e-5f);
  layer->Backward({&loss}, {true, false}, {&c.score, &c.label});
  EXPECT_NEAR(c.score.cpu_diff()[4], 2 * (0.6652410f - 1.0f) / 3, 1e-6f);
}

TEST(SoftmaxWithLossLayerTest, LabelCountMismatchIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor score({2, 3, 2}), label({2, 3}), loss;  // needs 2 x 2 labels
  try {
    layer->Initialize({&score, &label}, {&loss});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'loss'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 2 (12)"), std::string::npos) << msg;
  }
}

TEST(SoftmaxWithLossLayerTest, FirstDimensionMismatchIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor score({2, 3}), label({1, 2}), loss;
  EXPECT_THROW(layer->Initialize({&score, &label}, {&loss}), Error);
}

TEST(SoftmaxWithLossLayerTest, LabelOutOfRangeNamesLayerAndValue) {
  for (float bad : {3.0f, -2.0f}) {
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakeLoss(&ctx, "loss_param { ignore_label: -1 }");
    HandCase c;
    c.label.mutable_cpu_data()[2] = bad;
    Tensor loss;
    layer->Initialize({&c.score, &c.label}, {&loss});
    try {
      layer->Forward({&c.score, &c.label}, {&loss});
      FAIL() << "no error for label " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'loss'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("label value " + std::to_string(static_cast<int>(bad))), std::string::npos)
          << msg;
    }
  }
}

TEST(SoftmaxWithLossLayerTest, BackwardToLabelsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_param { ignore_label: -1 }");
  HandCase c;
  Tensor loss;
  layer->Initialize({&c.score, &c.label}, {&loss});
  layer->Forward({&c.score, &c.label}, {&loss});
  EXPECT_THROW(layer->Backward({&loss}, {true, true}, {&c.score, &c.label}), Error);
}

TEST(SoftmaxWithLossLayerTest, TooManyTopsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor score({2, 3}), label({2}), a, b, c;
  EXPECT_THROW(layer->Initialize({&score, &label}, {&a, &b, &c}), Error);
}

}  // namespace
}  // namespace cortado
