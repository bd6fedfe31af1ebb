// SPDX-License-Identifier: Apache-2.0
#include "layers/hinge_loss_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::SetData;

std::unique_ptr<Layer> MakeLoss(Context* ctx, const std::string& extra = "") {
  return CreateLayer(
      testing::LayerParam("name: 'hinge' type: 'HingeLoss' bottom: 'x' bottom: 'l' " + extra), ctx);
}

// Two samples, K = 3, labels (2, 0). Margins m = max(0, 1 + t x), t = -1 at the label:
//   sample 0: x = (0.5, -2, 1.5):   m = (1.5, 0, 0)
//   sample 1: x = (0.2, 0.3, -0.1): m = (0.8, 1.3, 0.9)
struct HandCase {
  Tensor x{std::vector<int>{2, 3}};
  Tensor label{std::vector<int>{2}};
  HandCase() {
    SetData(&x, {0.5f, -2.0f, 1.5f, 0.2f, 0.3f, -0.1f});
    SetData(&label, {2, 0});
  }
};

TEST(HingeLossLayerTest, LossTopIsAScalar) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor x({4, 5}), label({4}), loss;
  layer->Initialize({&x, &label}, {&loss});
  EXPECT_EQ(loss.num_axes(), 0);
  EXPECT_EQ(layer->loss(0), 1.0f);
  EXPECT_TRUE(layer->AllowForceBackward(0));
  EXPECT_FALSE(layer->AllowForceBackward(1));
}

TEST(HingeLossLayerTest, ForwardAndBackwardByHand) {
  for (const char* norm : {"L1", "L2"}) {
    SCOPED_TRACE(norm);
    const bool l2 = std::string(norm) == "L2";
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakeLoss(&ctx, std::string("hinge_loss_param { norm: ") + norm + " }");
    HandCase c;
    Tensor loss;
    layer->Initialize({&c.x, &c.label}, {&loss});
    layer->Forward({&c.x, &c.label}, {&loss});
    // L1: (1.5 + 0.8 + 1.3 + 0.9) / 2; L2: (2.25 + 0.64 + 1.69 + 0.81) / 2.
    EXPECT_NEAR(loss.cpu_data()[0], l2 ? 2.695f : 2.25f, 1e-6f);
    layer->Backward({&loss}, {true, false}, {&c.x, &c.label});
    // L1: t sign(m) / N; L2: 2 t m / N.
    const std::vector<float> expected = l2 ? std::vector<float>{1.5f, 0, 0, -0.8f, 1.3f, 0.9f}
                                           : std::vector<float>{0.5f, 0, 0, -0.5f, 0.5f, 0.5f};
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(c.x.cpu_diff()[i], expected[i], 1e-6f) << i;
  }
}

TEST(HingeLossLayerTest, DefaultNormIsL1AndWeightScales) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_weight: 0.5");
  HandCase c;
  Tensor loss;
  layer->Initialize({&c.x, &c.label}, {&loss});
  EXPECT_NEAR(layer->Forward({&c.x, &c.label}, {&loss}), 0.5f * 2.25f, 1e-6f);
  layer->Backward({&loss}, {true, false}, {&c.x, &c.label});
  EXPECT_NEAR(c.x.cpu_diff()[0], 0.25f, 1e-6f);
  EXPECT_NEAR(c.x.cpu_diff()[3], -0.25f, 1e-6f);
}

// The scores may have any shape: K = count / N, and the label indexes the flattened sample.
TEST(HingeLossLayerTest, ScoresOfAnyShape) {
  Context ctx(Device::Cpu(), 1701);
  auto flat = MakeLoss(&ctx, "hinge_loss_param { norm: L2 }");
  auto shaped = MakeLoss(&ctx, "hinge_loss_param { norm: L2 }");
  Tensor x({2, 6}), x4({2, 3, 1, 2}), label({2}), label4({2, 1, 1, 1}), loss, loss4;
  testing::FillGaussian(&x, 0.0f, 1.0f, 3);
  std::copy(x.cpu_data(), x.cpu_data() + 12, x4.mutable_cpu_data());
  SetData(&label, {5, 1});
  SetData(&label4, {5, 1});
  flat->Initialize({&x, &label}, {&loss});
  shaped->Initialize({&x4, &label4}, {&loss4});
  flat->Forward({&x, &label}, {&loss});
  shaped->Forward({&x4, &label4}, {&loss4});
  EXPECT_FLOAT_EQ(loss.cpu_data()[0], loss4.cpu_data()[0]);
  EXPECT_GT(loss.cpu_data()[0], 0.0f);
}

void RandomLabels(Tensor* label, int classes, unsigned seed) {
  std::mt19937 rng(seed);
  float* l = label->mutable_cpu_data();
  for (int i = 0; i < label->count(); ++i) l[i] = static_cast<float>(rng() % classes);
}

TEST(HingeLossLayerTest, Gradient) {
  for (const char* norm : {"L1", "L2"}) {
    SCOPED_TRACE(norm);
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakeLoss(&ctx, std::string("hinge_loss_param { norm: ") + norm + " }");
    Tensor x({4, 5, 2}), label({4}), loss;
    testing::FillGaussian(&x, 0.0f, 1.5f, 11);
    RandomLabels(&label, 10, 12);
    testing::GradientCheckOptions options;
    options.check_bottoms = {0};
    options.kink = 1.0f;  // the hinge: 1 + t x = 0
    options.kink_range = 0.02f;
    testing::GradientChecker(options).Check(layer.get(), {&x, &label}, {&loss});
  }
}

void ExpectError(Tensor* x, Tensor* label, const std::string& needle) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor loss;
  try {
    layer->Initialize({x, label}, {&loss});
    layer->Forward({x, label}, {&loss});
    FAIL() << "no error; wanted " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("layer 'hinge' (HingeLoss)"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(HingeLossLayerTest, LabelOutOfRangeIsAnError) {
  HandCase c;
  SetData(&c.label, {2, 3});
  ExpectError(&c.x, &c.label, "label value 3 of sample 1 is outside [0, 3)");
  SetData(&c.label, {-1, 0});
  ExpectError(&c.x, &c.label, "label value -1 of sample 0");
}

TEST(HingeLossLayerTest, BadShapesAreErrors) {
  Tensor x({2, 3}), two_per_sample({2, 2}), three({3}), none({0, 3}), no_label({0});
  ExpectError(&x, &two_per_sample, "labels");
  ExpectError(&x, &three, "same first dimension");
  ExpectError(&none, &no_label, "no sample");
}

TEST(HingeLossLayerTest, NoGradientForTheLabels) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  HandCase c;
  Tensor loss;
  layer->Initialize({&c.x, &c.label}, {&loss});
  layer->Forward({&c.x, &c.label}, {&loss});
  EXPECT_THROW(layer->Backward({&loss}, {true, true}, {&c.x, &c.label}), Error);
}

}  // namespace
}  // namespace cortado
