// SPDX-License-Identifier: Apache-2.0
// Loss layers on the GPU against the CPU, and their gradient checks there.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {
namespace {

// Integer labels in [0, classes), with every `ignore_every`-th one (when > 0) set to `ignore`.
void FillLabels(Tensor* t, int classes, unsigned seed, int ignore_every = 0, int ignore = -1) {
  std::mt19937 rng(seed);
  float* l = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) {
    l[i] = static_cast<float>(rng() % classes);
    if (ignore_every > 0 && i % ignore_every == 0) l[i] = static_cast<float>(ignore);
  }
}

// Scores gaussian, labels from FillLabels.
GpuCheckOptions ScoresAndLabels(int classes, int ignore_every = 0, int ignore = -1) {
  GpuCheckOptions options;
  options.propagate_down = {true, false};
  options.fill_bottom = [=](int i, Tensor* t) {
    if (i == 0) {
      FillGaussian(t, 0.0f, 2.0f, 3);
    } else {
      FillLabels(t, classes, 4, ignore_every, ignore);
    }
  };
  return options;
}

std::string SoftmaxLossText(const std::string& extra) {
  return "type: 'SoftmaxWithLoss' bottom: 'score' bottom: 'label' " + extra;
}

TEST(SoftmaxWithLossGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam(SoftmaxLossText("")), {{2, 4, 2, 3}, {2, 1, 2, 3}},
                     ScoresAndLabels(4));
}

TEST(SoftmaxWithLossGpuTest, IgnoreLabelEachNormalization) {
  CORTADO_REQUIRE_GPU();
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    SCOPED_TRACE(mode);
    CheckGpuMatchesCpu(LayerParam(SoftmaxLossText(fmt::format(
                           "loss_param {{ ignore_label: 1 normalization: {} }}", mode))),
                       {{2, 3, 4}, {2, 4}}, ScoresAndLabels(3, 3, 1));
  }
  // The legacy `normalize` field decides when `normalization` is unset.
  for (const char* normalize : {"true", "false"}) {
    SCOPED_TRACE(normalize);
    CheckGpuMatchesCpu(LayerParam(SoftmaxLossText(fmt::format(
                           "loss_param {{ ignore_label: 0 normalize: {} }}", normalize))),
                       {{3, 5, 2, 2}, {3, 2, 2}}, ScoresAndLabels(5, 4, 0));
  }
}

TEST(SoftmaxWithLossGpuTest, AllIgnoredDividesByOne) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam(SoftmaxLossText("loss_param { ignore_label: 2 }")),
                     {{2, 3, 4}, {2, 4}}, ScoresAndLabels(3, 1, 2));
}

TEST(SoftmaxWithLossGpuTest, AnyAxis) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam(SoftmaxLossText("softmax_param { axis: -1 }")), {{2, 3, 4}, {2, 3}},
                     ScoresAndLabels(4));
  CheckGpuMatchesCpu(LayerParam(SoftmaxLossText("softmax_param { axis: 2 }")),
                     {{2, 3, 6, 5}, {2, 3, 5}}, ScoresAndLabels(6));
  CheckGpuMatchesCpu(LayerParam(SoftmaxLossText("")), {{8, 1000}, {8}}, ScoresAndLabels(1000));
}

TEST(SoftmaxWithLossGpuTest, ProbabilityTopAndLossWeight) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(
      LayerParam(SoftmaxLossText("top: 'loss' top: 'prob' loss_weight: 2.5 loss_weight: 0 "
                                 "loss_param { ignore_label: -1 }")),
      {{2, 4, 3}, {2, 3}}, ScoresAndLabels(4, 5, -1));
}

// More positions than one pass of the reduction's blocks covers.
TEST(SoftmaxWithLossGpuTest, ManyPositions) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options = ScoresAndLabels(3, 7, 0);
  options.tolerance = 1e-3f;
  CheckGpuMatchesCpu(LayerParam(SoftmaxLossText("loss_param { ignore_label: 0 }")),
                     {{4, 3, 200, 200}, {4, 200, 200}}, options);
}

TEST(SoftmaxWithLossGpuTest, LabelOutOfRangeIsAnError) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  auto layer = CreateLayer(LayerParam(SoftmaxLossText("")), &ctx);
  Tensor score({2, 4, 3}), label({2, 3}), loss;
  FillGaussian(&score);
  FillLabels(&label, 4, 1);
  label.mutable_cpu_data()[4] = 7.0f;
  layer->Initialize({&score, &label}, {&loss});
  try {
    layer->Forward({&score, &label}, {&loss});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("label value 7 at position 4"), std::string::npos)
        << e.what();
  }
}

TEST(SoftmaxWithLossGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    SCOPED_TRACE(mode);
    Context ctx(Device::Cuda(0), 1701);
    auto layer = CreateLayer(LayerParam(SoftmaxLossText(fmt::format(
                                 "loss_param {{ ignore_label: 1 normalization: {} }}", mode))),
                             &ctx);
    Tensor score({2, 3, 4}), label({2, 4}), loss;
    FillGaussian(&score, 0.0f, 1.0f, 5);
    FillLabels(&label, 3, 9);
    label.mutable_cpu_data()[0] = 1.0f;  // at least one ignored position
    GradientCheckOptions options;
    options.check_bottoms = {0};
    GradientChecker(options).Check(layer.get(), {&score, &label}, {&loss});
  }
}

std::string EuclideanText(const std::string& extra = "") {
  return "type: 'EuclideanLoss' bottom: 'a' bottom: 'b' " + extra;
}

TEST(EuclideanLossGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam(EuclideanText()), {{3, 2, 2}, {3, 4}});
  CheckGpuMatchesCpu(LayerParam(EuclideanText("loss_weight: 0.7")), {{5, 3, 4}, {5, 12}});
  GpuCheckOptions one_side;
  one_side.propagate_down = {false, true};
  CheckGpuMatchesCpu(LayerParam(EuclideanText()), {{3, 4}, {3, 4}}, one_side);
}

TEST(EuclideanLossGpuTest, ManyElements) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.tolerance = 1e-3f;
  CheckGpuMatchesCpu(LayerParam(EuclideanText()), {{16, 3, 64, 64}, {16, 3, 64, 64}}, options);
}

TEST(EuclideanLossGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  auto layer = CreateLayer(LayerParam(EuclideanText()), &ctx);
  Tensor a({3, 2, 2}), b({3, 2, 2}), loss;
  FillGaussian(&a, 0.0f, 1.0f, 1);
  FillGaussian(&b, 0.0f, 1.0f, 2);
  GradientChecker().Check(layer.get(), {&a, &b}, {&loss});
}

std::string CrossEntropyText(const std::string& extra = "") {
  return "type: 'SigmoidCrossEntropyLoss' bottom: 'x' bottom: 't' " + extra;
}

// Scores gaussian, targets in [0, 1] with every fifth one -1 (the ignore label in these tests).
GpuCheckOptions ScoresAndTargets() {
  GpuCheckOptions options;
  options.propagate_down = {true, false};
  options.fill_bottom = [](int i, Tensor* t) {
    if (i == 0) {
      FillGaussian(t, 0.0f, 3.0f, 3);
    } else {
      FillUniform(t, 0.0f, 1.0f, 4);
      for (int j = 0; j < t->count(); j += 5) t->mutable_cpu_data()[j] = -1.0f;
    }
  };
  return options;
}

TEST(SigmoidCrossEntropyLossGpuTest, MatchesCpuEachNormalization) {
  CORTADO_REQUIRE_GPU();
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    SCOPED_TRACE(mode);
    CheckGpuMatchesCpu(LayerParam(CrossEntropyText(fmt::format(
                           "loss_param {{ ignore_label: -1 normalization: {} }}", mode))),
                       {{2, 3, 4}, {2, 3, 4}}, ScoresAndTargets());
  }
  // Defaults (BATCH_SIZE), no ignore label: the -1 targets count as ordinary values.
  CheckGpuMatchesCpu(LayerParam(CrossEntropyText()), {{3, 4}, {3, 4}}, ScoresAndTargets());
  CheckGpuMatchesCpu(LayerParam(CrossEntropyText("loss_param { normalize: true }")),
                     {{3, 4}, {3, 4}}, ScoresAndTargets());
  CheckGpuMatchesCpu(LayerParam(CrossEntropyText("loss_weight: 1.5")), {{3, 4}, {3, 4}},
                     ScoresAndTargets());
}

TEST(SigmoidCrossEntropyLossGpuTest, ManyElements) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options = ScoresAndTargets();
  options.tolerance = 1e-3f;
  CheckGpuMatchesCpu(
      LayerParam(CrossEntropyText("loss_param { ignore_label: -1 normalization: VALID }")),
      {{8, 3, 100, 100}, {8, 3, 100, 100}}, options);
}

TEST(SigmoidCrossEntropyLossGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    SCOPED_TRACE(mode);
    Context ctx(Device::Cuda(0), 1701);
    auto layer = CreateLayer(LayerParam(CrossEntropyText(fmt::format(
                                 "loss_param {{ ignore_label: -1 normalization: {} }}", mode))),
                             &ctx);
    Tensor x({2, 3, 2}), t({2, 3, 2}), loss;
    FillGaussian(&x, 0.0f, 2.0f, 3);
    FillUniform(&t, 0.0f, 1.0f, 4);
    t.mutable_cpu_data()[5] = -1.0f;
    GradientCheckOptions options;
    options.check_bottoms = {0};
    GradientChecker(options).Check(layer.get(), {&x, &t}, {&loss});
  }
}

}  // namespace
}  // namespace cortado::testing
