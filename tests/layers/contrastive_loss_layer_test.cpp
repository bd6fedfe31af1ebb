// SPDX-License-Identifier: Apache-2.0
#include "layers/contrastive_loss_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::SetData;

std::unique_ptr<Layer> MakeLoss(Context* ctx, const std::string& extra = "") {
  return CreateLayer(testing::LayerParam("name: 'cl' type: 'ContrastiveLoss' bottom: 'a' "
                                         "bottom: 'b' bottom: 'y' " +
                                         extra),
                     ctx);
}

// Three pairs, C = 2:
//   pair 0: a - b = (0, 2),       d^2 = 4,    similar
//   pair 1: a - b = (-0.3, -0.4), d = 0.5,    dissimilar
//   pair 2: a - b = (3, 0),       d = 3,      dissimilar
struct HandCase {
  Tensor a{std::vector<int>{3, 2}};
  Tensor b{std::vector<int>{3, 2}};
  Tensor y{std::vector<int>{3}};
  HandCase() {
    SetData(&a, {1, 2, 0, 0, 3, 0});
    SetData(&b, {1, 0, 0.3f, 0.4f, 0, 0});
    SetData(&y, {1, 0, 0});
  }
  std::vector<Tensor*> bottom() { return {&a, &b, &y}; }
};

float ForwardLoss(const std::string& extra, HandCase* c) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, extra);
  Tensor loss;
  layer->Initialize(c->bottom(), {&loss});
  layer->Forward(c->bottom(), {&loss});
  return loss.cpu_data()[0];
}

TEST(ContrastiveLossLayerTest, LossTopIsAScalar) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor a({4, 3, 1, 1}), b({4, 3}), y({4, 1, 1, 1}), loss;
  layer->Initialize({&a, &b, &y}, {&loss});
  EXPECT_EQ(loss.num_axes(), 0);
  EXPECT_EQ(loss.count(), 1);
  EXPECT_EQ(layer->loss(0), 1.0f);
  EXPECT_TRUE(layer->AutoTopBlobs());
  EXPECT_TRUE(layer->AllowForceBackward(0));
  EXPECT_TRUE(layer->AllowForceBackward(1));
  EXPECT_FALSE(layer->AllowForceBackward(2));
}

TEST(ContrastiveLossLayerTest, ForwardByHand) {
  HandCase c;
  // Default margin 1: 4 + (1 - 0.5)^2 + 0, over 2 N = 6.
  EXPECT_NEAR(ForwardLoss("", &c), 4.25f / 6.0f, 1e-6f);
  // Margin 10: 4 + 9.5^2 + 7^2.
  EXPECT_NEAR(ForwardLoss("contrastive_loss_param { margin: 10 }", &c), 143.25f / 6.0f, 1e-5f);
  // Legacy: 4 + max(1 - 0.25, 0) + max(1 - 9, 0).
  EXPECT_NEAR(ForwardLoss("contrastive_loss_param { legacy_version: true }", &c), 4.75f / 6.0f,
              1e-6f);
}

TEST(ContrastiveLossLayerTest, SimilarityIsTheLabelTruncatedToInt) {
  HandCase c;
  SetData(&c.y, {2.0f, 0.7f, -0.4f});  // similar, dissimilar, dissimilar
  EXPECT_NEAR(ForwardLoss("", &c), 4.25f / 6.0f, 1e-6f);
  SetData(&c.y, {0.0f, 1.0f, 1.0f});  // 0 (d = 2 > margin) + 0.25 + 9
  EXPECT_NEAR(ForwardLoss("", &c), 9.25f / 6.0f, 1e-6f);
}

TEST(ContrastiveLossLayerTest, LossWeightScalesTheReturnedLoss) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_weight: 3");
  HandCase c;
  Tensor loss;
  layer->Initialize(c.bottom(), {&loss});
  EXPECT_NEAR(layer->Forward(c.bottom(), {&loss}), 3.0f * 4.25f / 6.0f, 1e-5f);
  EXPECT_NEAR(loss.cpu_data()[0], 4.25f / 6.0f, 1e-6f);
}

TEST(ContrastiveLossLayerTest, BackwardByHand) {
  for (bool legacy : {false, true}) {
    SCOPED_TRACE(legacy);
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakeLoss(&ctx, legacy ? "contrastive_loss_param { legacy_version: true }" : "");
    HandCase c;
    Tensor loss;
    layer->Initialize(c.bottom(), {&loss});
    layer->Forward(c.bottom(), {&loss});
    loss.mutable_cpu_diff()[0] = 2.0f;  // w
    layer->Backward({&loss}, {true, true, false}, c.bottom());
    // alpha = w / N = 2/3. Pair 0 (similar): alpha (a - b). Pair 1 (dissimilar, inside the
    // margin): -alpha (m - d) / (d + 1e-4) (a - b), or -alpha (a - b) for legacy. Pair 2: 0.
    const float alpha = 2.0f / 3.0f;
    const float s1 = legacy ? -alpha : -alpha * 0.5f / (0.5f + 1e-4f);
    const std::vector<float> da = {0, 2 * alpha, -0.3f * s1, -0.4f * s1, 0, 0};
    for (int i = 0; i < 6; ++i) {
      EXPECT_NEAR(c.a.cpu_diff()[i], da[i], 1e-6f) << i;
      EXPECT_NEAR(c.b.cpu_diff()[i], -da[i], 1e-6f) << i;
    }
  }
}

// Pairs at chosen distances (b = a + r u, u a random unit vector), clear of the margin's kink
// (d = margin, or d^2 = margin for legacy).
void CheckGradient(const std::string& extra, float margin, bool legacy) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, extra);
  Tensor a({6, 3}), b({6, 3, 1, 1}), y({6}), u({6, 3}), loss;
  testing::FillGaussian(&a, 0.0f, 1.0f, 7);
  testing::FillGaussian(&u, 0.0f, 1.0f, 8);
  const float r[] = {0.4f, 0.6f, 1.5f, 0.3f, 0.8f, 2.0f};
  for (int n = 0; n < 6; ++n) {
    const float* un = u.cpu_data() + n * 3;
    const float norm = std::sqrt(un[0] * un[0] + un[1] * un[1] + un[2] * un[2]);
    for (int c = 0; c < 3; ++c) {
      b.mutable_cpu_data()[n * 3 + c] = a.cpu_data()[n * 3 + c] + r[n] * un[c] / norm;
    }
  }
  SetData(&y, {1, 0, 0, 1, 0, 0});
  int active = 0;
  for (int n = 0; n < 6; ++n) {
    double d2 = 0.0;
    for (int c = 0; c < 3; ++c) {
      const double d = a.cpu_data()[n * 3 + c] - b.cpu_data()[n * 3 + c];
      d2 += d * d;
    }
    const double gap = legacy ? margin - d2 : margin - std::sqrt(d2);
    if (y.cpu_data()[n] == 0.0f) {
      ASSERT_GT(std::fabs(gap), 0.1) << "pair " << n << " sits at the kink; pick other distances";
      active += gap > 0.0 ? 1 : 0;
    }
  }
  ASSERT_GT(active, 0) << "no dissimilar pair inside the margin: the test would miss that branch";
  testing::GradientCheckOptions options;
  options.check_bottoms = {0, 1};
  testing::GradientChecker(options).Check(layer.get(), {&a, &b, &y}, {&loss});
}

TEST(ContrastiveLossLayerTest, Gradient) { CheckGradient("", 1.0f, false); }

TEST(ContrastiveLossLayerTest, GradientLegacy) {
  CheckGradient("contrastive_loss_param { legacy_version: true margin: 0.5 }", 0.5f, true);
}

void ExpectInvalid(const std::vector<int>& a_shape, const std::vector<int>& b_shape,
                   const std::vector<int>& y_shape, const std::string& what) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  Tensor a(a_shape), b(b_shape), y(y_shape), loss;
  try {
    layer->Initialize({&a, &b, &y}, {&loss});
    FAIL() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
    EXPECT_NE(std::string(e.what()).find("layer 'cl' (ContrastiveLoss)"), std::string::npos)
        << e.what();
  }
}

TEST(ContrastiveLossLayerTest, BadShapesAreErrors) {
  ExpectInvalid({3, 2}, {3, 3}, {3}, "different C");
  ExpectInvalid({3, 2}, {4, 2}, {3}, "different N");
  ExpectInvalid({3, 2, 2, 1}, {3, 2, 2, 1}, {3}, "spatial axes");
  ExpectInvalid({3, 2}, {3, 2}, {3, 2}, "two labels per pair");
  ExpectInvalid({3, 2}, {3, 2}, {2}, "too few labels");
  ExpectInvalid({0, 2}, {0, 2}, {0}, "no pairs");
}

TEST(ContrastiveLossLayerTest, NoGradientForTheLabel) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  HandCase c;
  Tensor loss;
  layer->Initialize(c.bottom(), {&loss});
  layer->Forward(c.bottom(), {&loss});
  try {
    layer->Backward({&loss}, {true, true, true}, c.bottom());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'cl' (ContrastiveLoss)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cortado
