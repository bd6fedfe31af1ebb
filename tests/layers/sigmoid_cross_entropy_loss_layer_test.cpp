// SPDX-License-Identifier: Apache-2.0
#include "layers/sigmoid_cross_entropy_loss_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> MakeLoss(Context* ctx, const std::string& extra = "") {
  return CreateLayer(testing::LayerParam("name: 'xent' type: 'SigmoidCrossEntropyLoss' "
                                         "bottom: 'score' bottom: 'target' " +
                                         extra),
                     ctx);
}

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(t->count(), static_cast<int>(values.size()));
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

// Scores x = (2, -1, 0.5, -3) in a 2 x 2 blob with targets t = (1, 0, 1, -1). Each counted
// element adds -[t log s(x) + (1 - t) log(1 - s(x))]:
//   x = 2,   t = 1: log(1 + e^-2)   = 0.1269280
//   x = -1,  t = 0: log(1 + e^-1)   = 0.3132617
//   x = 0.5, t = 1: log(1 + e^-0.5) = 0.4740770
// The sum of these three is 0.9142667. The fourth (x = -3) has t = -1, the ignore_label in the
// tests that set one; with t = 1 it would add log(1 + e^3) = 3.0485874.
constexpr float kSum3 = 0.9142667f;

float ForwardLoss(const std::string& extra, float last_target = -1.0f) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, extra);
  Tensor x({2, 2}), t({2, 2}), loss;
  SetData(&x, {2.0f, -1.0f, 0.5f, -3.0f});
  SetData(&t, {1.0f, 0.0f, 1.0f, last_target});
  layer->Initialize({&x, &t}, {&loss});
  const float weighted = layer->Forward({&x, &t}, {&loss});
  EXPECT_FLOAT_EQ(weighted, loss.cpu_data()[0]);
  return loss.cpu_data()[0];
}

TEST(SigmoidCrossEntropyLossLayerTest, LossTopIsAScalar) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor x({2, 3, 4}), t({2, 12}), loss;
  layer->Initialize({&x, &t}, {&loss});
  EXPECT_EQ(loss.num_axes(), 0);
  EXPECT_EQ(loss.count(), 1);
  EXPECT_EQ(layer->loss(0), 1.0f);
  EXPECT_FALSE(layer->AllowForceBackward(1));
}

TEST(SigmoidCrossEntropyLossLayerTest, DefaultDividesByBatchSize) {
  // No ignore_label, all four counted: (0.9142667 + 3.0485874) / N with N = 2.
  EXPECT_NEAR(ForwardLoss("", 1.0f), (kSum3 + 3.0485874f) / 2, 1e-5f);
}

TEST(SigmoidCrossEntropyLossLayerTest, ForwardEachNormalization) {
  const std::string ignore = "loss_param { ignore_label: -1 ";
  // 4 elements, 3 counted, batch of 2.
  EXPECT_NEAR(ForwardLoss(ignore + "normalization: FULL }"), kSum3 / 4, 1e-6f);
  EXPECT_NEAR(ForwardLoss(ignore + "normalization: VALID }"), kSum3 / 3, 1e-6f);
  EXPECT_NEAR(ForwardLoss(ignore + "normalization: BATCH_SIZE }"), kSum3 / 2, 1e-6f);
  EXPECT_NEAR(ForwardLoss(ignore + "normalization: NONE }"), kSum3, 1e-6f);
  // Neither normalization nor normalize set: BATCH_SIZE, as in current Caffe.
  EXPECT_NEAR(ForwardLoss(ignore + "}"), kSum3 / 2, 1e-6f);
}

TEST(SigmoidCrossEntropyLossLayerTest, LegacyNormalizeFlag) {
  const std::string ignore = "loss_param { ignore_label: -1 ";
  EXPECT_NEAR(ForwardLoss(ignore + "normalize: true }"), kSum3 / 3, 1e-6f);   // VALID
  EXPECT_NEAR(ForwardLoss(ignore + "normalize: false }"), kSum3 / 2, 1e-6f);  // BATCH_SIZE
  EXPECT_NEAR(ForwardLoss(ignore + "normalize: false normalization: FULL }"), kSum3 / 4, 1e-6f);
}

TEST(SigmoidCrossEntropyLossLayerTest, LargeScoresStayFinite) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_param { normalization: NONE }");
  // A confident wrong answer costs about |x|: log(1 + e^100) = 100 (+ e^-100).
  Tensor x({2, 1}), t({2, 1}), loss;
  SetData(&x, {100.0f, -100.0f});
  SetData(&t, {0.0f, 1.0f});
  layer->Initialize({&x, &t}, {&loss});
  layer->Forward({&x, &t}, {&loss});
  EXPECT_NEAR(loss.cpu_data()[0], 200.0f, 1e-3f);
  layer->Backward({&loss}, {true, false}, {&x, &t});
  EXPECT_NEAR(x.cpu_diff()[0], 1.0f, 1e-6f);
  EXPECT_NEAR(x.cpu_diff()[1], -1.0f, 1e-6f);
}

TEST(SigmoidCrossEntropyLossLayerTest, BackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_param { ignore_label: -1 normalization: VALID }");
  Tensor x({2, 2}), t({2, 2}), loss;
  SetData(&x, {2.0f, -1.0f, 0.5f, -3.0f});
  SetData(&t, {1.0f, 0.0f, 1.0f, -1.0f});
  layer->Initialize({&x, &t}, {&loss});
  layer->Forward({&x, &t}, {&loss});
  layer->Backward({&loss}, {true, false}, {&x, &t});
  // (sigmoid(x) - t) / 3: sigmoid(2) = 0.8807971, sigmoid(-1) = 0.2689414,
  // sigmoid(0.5) = 0.6224593; the ignored element gets 0.
  EXPECT_NEAR(x.cpu_diff()[0], (0.8807971f - 1.0f) / 3, 1e-6f);
  EXPECT_NEAR(x.cpu_diff()[1], 0.2689414f / 3, 1e-6f);
  EXPECT_NEAR(x.cpu_diff()[2], (0.6224593f - 1.0f) / 3, 1e-6f);
  EXPECT_EQ(x.cpu_diff()[3], 0.0f);
}

TEST(SigmoidCrossEntropyLossLayerTest, GradientEachNormalization) {
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    SCOPED_TRACE(mode);
    Context ctx(Device::Cpu(), 1701);
    auto layer =
        MakeLoss(&ctx, std::string("loss_param { ignore_label: -1 normalization: ") + mode + " }");
    Tensor x({2, 3, 2}), t({2, 3, 2}), loss;
    testing::FillGaussian(&x, 0.0f, 2.0f, 3);
    testing::FillUniform(&t, 0.0f, 1.0f, 4);
    t.mutable_cpu_data()[5] = -1.0f;
    testing::GradientCheckOptions options;
    options.check_bottoms = {0};
    testing::GradientChecker(options).Check(layer.get(), {&x, &t}, {&loss});
  }
}

TEST(SigmoidCrossEntropyLossLayerTest, GradientDefault) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor x({3, 4}), t({3, 4}), loss;
  testing::FillGaussian(&x, 0.0f, 2.0f, 5);
  testing::FillUniform(&t, 0.0f, 1.0f, 6);
  testing::GradientCheckOptions options;
  options.check_bottoms = {0};
  testing::GradientChecker(options).Check(layer.get(), {&x, &t}, {&loss});
}

TEST(SigmoidCrossEntropyLossLayerTest, LossTopDiffScalesGradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor x({2, 3}), t({2, 3}), loss;
  testing::FillGaussian(&x, 0.0f, 1.0f, 1);
  testing::FillUniform(&t, 0.0f, 1.0f, 2);
  layer->Initialize({&x, &t}, {&loss});
  layer->Forward({&x, &t}, {&loss});
  layer->Backward({&loss}, {true, false}, {&x, &t});
  std::vector<float> once(x.cpu_diff(), x.cpu_diff() + 6);
  loss.mutable_cpu_diff()[0] = 2.0f;
  layer->Backward({&loss}, {true, false}, {&x, &t});
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(x.cpu_diff()[i], 2 * once[i]);
}

TEST(SigmoidCrossEntropyLossLayerTest, CountMismatchIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor x({2, 3}), t({2, 4}), loss;
  try {
    layer->Initialize({&x, &t}, {&loss});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'xent'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 (6)"), std::string::npos) << msg;
  }
}

TEST(SigmoidCrossEntropyLossLayerTest, BackwardToTargetsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor x({2, 3}), t({2, 3}), loss;
  testing::FillGaussian(&x, 0.0f, 1.0f, 1);
  testing::FillUniform(&t, 0.0f, 1.0f, 2);
  layer->Initialize({&x, &t}, {&loss});
  layer->Forward({&x, &t}, {&loss});
  EXPECT_THROW(layer->Backward({&loss}, {true, true}, {&x, &t}), Error);
}

}  // namespace
}  // namespace cortado
