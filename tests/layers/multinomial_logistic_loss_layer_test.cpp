// SPDX-License-Identifier: Apache-2.0
#include "layers/multinomial_logistic_loss_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::SetData;

std::unique_ptr<Layer> MakeLoss(Context* ctx, const std::string& extra = "") {
  return CreateLayer(testing::LayerParam("name: 'mll' type: 'MultinomialLogisticLoss' "
                                         "bottom: 'p' bottom: 'l' " +
                                         extra),
                     ctx);
}

TEST(MultinomialLogisticLossLayerTest, LossTopIsAScalar) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor p({4, 5, 1, 1}), label({4, 1, 1, 1}), loss;
  layer->Initialize({&p, &label}, {&loss});
  EXPECT_EQ(loss.num_axes(), 0);
  EXPECT_EQ(layer->loss(0), 1.0f);
  EXPECT_FALSE(layer->AllowForceBackward(1));
}

TEST(MultinomialLogisticLossLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor p({2, 3, 1, 1}), label({2}), loss;
  SetData(&p, {0.2f, 0.5f, 0.3f, 0.6f, 0.1f, 0.3f});
  SetData(&label, {1, 2});
  layer->Initialize({&p, &label}, {&loss});
  EXPECT_NEAR(layer->Forward({&p, &label}, {&loss}), -(std::log(0.5f) + std::log(0.3f)) / 2, 1e-6f);
  layer->Backward({&loss}, {true, false}, {&p, &label});
  // -1 / (N p) at each label, 0 elsewhere.
  const std::vector<float> expected = {0, -1.0f, 0, 0, 0, -1.0f / 0.6f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(p.cpu_diff()[i], expected[i], 1e-6f) << i;
}

// A zero probability at the label is clamped to 1e-20 (Caffe's kLOG_THRESHOLD), in both passes.
TEST(MultinomialLogisticLossLayerTest, ZeroProbabilityIsClamped) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_weight: 1e-20");
  Tensor p({1, 2}), label({1}), loss;
  SetData(&p, {0.0f, 1.0f});
  SetData(&label, {0});
  layer->Initialize({&p, &label}, {&loss});
  layer->Forward({&p, &label}, {&loss});
  EXPECT_NEAR(loss.cpu_data()[0], 20.0f * std::log(10.0f), 1e-4f);
  layer->Backward({&loss}, {true, false}, {&p, &label});
  // -w / max(0, 1e-20) with w = 1e-20.
  EXPECT_NEAR(p.cpu_diff()[0], -1.0f, 1e-4f);
  EXPECT_EQ(p.cpu_diff()[1], 0.0f);
}

TEST(MultinomialLogisticLossLayerTest, Gradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor p({4, 5}), label({4}), loss;
  testing::FillUniform(&p, 0.2f, 1.0f, 5);
  SetData(&label, {0, 4, 2, 2});
  testing::GradientCheckOptions options;
  options.check_bottoms = {0};
  options.step = 2e-3f;  // the loss curves fast (1/p^2) at small p
  testing::GradientChecker(options).Check(layer.get(), {&p, &label}, {&loss});
}

void ExpectError(const std::vector<int>& p_shape, const std::vector<int>& label_shape,
                 const std::vector<float>& labels, const std::string& needle) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor p(p_shape), label(label_shape), loss;
  testing::FillUniform(&p, 0.1f, 1.0f);
  if (!labels.empty()) SetData(&label, labels);
  try {
    layer->Initialize({&p, &label}, {&loss});
    layer->Forward({&p, &label}, {&loss});
    FAIL() << "no error; wanted " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("layer 'mll' (MultinomialLogisticLoss)"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(MultinomialLogisticLossLayerTest, LabelOutOfRangeIsAnError) {
  ExpectError({2, 3}, {2}, {0, 3}, "label value 3 of sample 1 is outside [0, 3)");
  ExpectError({2, 3}, {2}, {-2, 0}, "label value -2 of sample 0");
}

TEST(MultinomialLogisticLossLayerTest, BadShapesAreErrors) {
  ExpectError({2, 3}, {2, 2}, {}, "one label per sample");
  ExpectError({2, 3}, {3}, {}, "same first dimension");
  ExpectError({0, 3}, {0}, {}, "no sample");
}

}  // namespace
}  // namespace cortado
