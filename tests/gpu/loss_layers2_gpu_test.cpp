// SPDX-License-Identifier: Apache-2.0
// ContrastiveLoss, HingeLoss, InfogainLoss, MultinomialLogisticLoss, BatchReindex and Filter on
// the GPU against the CPU, and their gradient checks there.
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

// Integer values in [0, classes) (labels, indices), with every `ignore_every`-th one (when > 0)
// set to `ignore`.
void FillIntegers(Tensor* t, int classes, unsigned seed, int ignore_every = 0, int ignore = -1) {
  std::mt19937 rng(seed);
  float* l = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) {
    l[i] = static_cast<float>(rng() % classes);
    if (ignore_every > 0 && i % ignore_every == 0) l[i] = static_cast<float>(ignore);
  }
}

// Runs Forward on the GPU and expects kInvalidArgument whose message holds `needle`.
void ExpectForwardError(const std::string& text, const std::vector<Tensor*>& bottom,
                        const std::string& needle) {
  Context ctx(Device::Cuda(0), 1701);
  auto layer = CreateLayer(LayerParam(text), &ctx);
  Tensor loss;
  layer->Initialize(bottom, {&loss});
  try {
    layer->Forward(bottom, {&loss});
    FAIL() << "no error; wanted " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// --- ContrastiveLoss ---

std::string ContrastiveText(const std::string& extra = "") {
  return "name: 'cl' type: 'ContrastiveLoss' bottom: 'a' bottom: 'b' bottom: 'y' " + extra;
}

GpuCheckOptions PairsAndSimilarity() {
  GpuCheckOptions options;
  options.propagate_down = {true, true, false};
  options.fill_bottom = [](int i, Tensor* t) {
    if (i == 2) {
      FillIntegers(t, 2, 5);
    } else {
      FillGaussian(t, 0.0f, 0.5f, 6 + i);
    }
  };
  return options;
}

TEST(ContrastiveLossGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (const char* extra : {"", "contrastive_loss_param { margin: 2 }",
                            "contrastive_loss_param { legacy_version: true margin: 2 }",
                            "loss_weight: 0.5 contrastive_loss_param { legacy_version: true }"}) {
    SCOPED_TRACE(extra);
    CheckGpuMatchesCpu(LayerParam(ContrastiveText(extra)), {{16, 5}, {16, 5, 1, 1}, {16}},
                       PairsAndSimilarity());
  }
  GpuCheckOptions one_side = PairsAndSimilarity();
  one_side.propagate_down = {false, true, false};
  CheckGpuMatchesCpu(LayerParam(ContrastiveText()), {{8, 3}, {8, 3}, {8, 1, 1, 1}}, one_side);
}

TEST(ContrastiveLossGpuTest, ManyPairs) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options = PairsAndSimilarity();
  options.tolerance = 1e-3f;
  CheckGpuMatchesCpu(LayerParam(ContrastiveText("contrastive_loss_param { margin: 3 }")),
                     {{5000, 16}, {5000, 16}, {5000}}, options);
}

TEST(ContrastiveLossGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const char* extra : {"contrastive_loss_param { margin: 1.2 }",
                            "contrastive_loss_param { legacy_version: true margin: 0.8 }"}) {
    SCOPED_TRACE(extra);
    Context ctx(Device::Cuda(0), 1701);
    auto layer = CreateLayer(LayerParam(ContrastiveText(extra)), &ctx);
    // b = a + r u with u a unit vector: distances r, clear of both kinks.
    Tensor a({6, 3}), b({6, 3}), y({6}), loss;
    FillGaussian(&a, 0.0f, 1.0f, 1);
    const float r[] = {0.4f, 0.6f, 1.5f, 0.3f, 0.7f, 2.0f};
    for (int n = 0; n < 6; ++n) {
      for (int c = 0; c < 3; ++c) {
        b.mutable_cpu_data()[n * 3 + c] = a.cpu_data()[n * 3 + c] + (c == n % 3 ? r[n] : 0.0f);
      }
    }
    const float similar[] = {1, 0, 0, 1, 0, 0};
    std::copy(similar, similar + 6, y.mutable_cpu_data());
    GradientCheckOptions options;
    options.check_bottoms = {0, 1};
    GradientChecker(options).Check(layer.get(), {&a, &b, &y}, {&loss});
  }
}

// --- HingeLoss ---

std::string HingeText(const std::string& extra = "") {
  return "name: 'hinge' type: 'HingeLoss' bottom: 'x' bottom: 'l' " + extra;
}

GpuCheckOptions ScoresAndLabels(int classes) {
  GpuCheckOptions options;
  options.propagate_down = {true, false};
  options.fill_bottom = [=](int i, Tensor* t) {
    if (i == 0) {
      FillGaussian(t, 0.0f, 1.5f, 3);
    } else {
      FillIntegers(t, classes, 4);
    }
  };
  return options;
}

TEST(HingeLossGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (const char* extra : {"", "hinge_loss_param { norm: L2 }", "loss_weight: 2.5"}) {
    SCOPED_TRACE(extra);
    CheckGpuMatchesCpu(LayerParam(HingeText(extra)), {{6, 7}, {6}}, ScoresAndLabels(7));
    CheckGpuMatchesCpu(LayerParam(HingeText(extra)), {{3, 2, 2, 2}, {3, 1, 1, 1}},
                       ScoresAndLabels(8));
  }
  GpuCheckOptions options = ScoresAndLabels(1000);
  options.tolerance = 1e-3f;
  CheckGpuMatchesCpu(LayerParam(HingeText("hinge_loss_param { norm: L2 }")), {{64, 1000}, {64}},
                     options);
}

TEST(HingeLossGpuTest, LabelOutOfRangeIsAnError) {
  CORTADO_REQUIRE_GPU();
  Tensor x({3, 4}), label({3});
  FillGaussian(&x);
  const float labels[] = {1, 3, 4};
  std::copy(labels, labels + 3, label.mutable_cpu_data());
  ExpectForwardError(HingeText(), {&x, &label}, "label value 4 of sample 2 is outside [0, 4)");
}

TEST(HingeLossGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const char* norm : {"L1", "L2"}) {
    SCOPED_TRACE(norm);
    Context ctx(Device::Cuda(0), 1701);
    auto layer = CreateLayer(
        LayerParam(HingeText(fmt::format("hinge_loss_param {{ norm: {} }}", norm))), &ctx);
    Tensor x({4, 5}), label({4}), loss;
    FillGaussian(&x, 0.0f, 1.5f, 11);
    FillIntegers(&label, 5, 12);
    GradientCheckOptions options;
    options.check_bottoms = {0};
    options.kink = 1.0f;
    options.kink_range = 0.02f;
    GradientChecker(options).Check(layer.get(), {&x, &label}, {&loss});
  }
}

// --- InfogainLoss ---

std::string InfogainText(const std::string& extra = "") {
  return "name: 'info' type: 'InfogainLoss' bottom: 'x' bottom: 'l' bottom: 'H' " + extra;
}

GpuCheckOptions ScoresLabelsMatrix(int classes, int ignore_every = 0, int ignore = -1) {
  GpuCheckOptions options;
  options.propagate_down = {true, false, false};
  options.fill_bottom = [=](int i, Tensor* t) {
    if (i == 0) {
      FillGaussian(t, 0.0f, 2.0f, 3);
    } else if (i == 1) {
      FillIntegers(t, classes, 4, ignore_every, ignore);
    } else {
      FillUniform(t, 0.0f, 1.0f, 5);
    }
  };
  return options;
}

TEST(InfogainLossGpuTest, MatchesCpuEachNormalization) {
  CORTADO_REQUIRE_GPU();
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    SCOPED_TRACE(mode);
    CheckGpuMatchesCpu(LayerParam(InfogainText(fmt::format(
                           "loss_param {{ ignore_label: 1 normalization: {} }}", mode))),
                       {{2, 3, 4}, {2, 4}, {1, 1, 3, 3}}, ScoresLabelsMatrix(3, 3, 1));
  }
  // Every position ignored: the normalizer is 1 and the gradient 0.
  CheckGpuMatchesCpu(LayerParam(InfogainText("loss_param { ignore_label: 2 }")),
                     {{2, 3, 4}, {2, 4}, {1, 1, 3, 3}}, ScoresLabelsMatrix(3, 1, 2));
}

TEST(InfogainLossGpuTest, AxisProbabilityTopAndLossWeight) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam(InfogainText("infogain_loss_param { axis: -1 }")),
                     {{2, 3, 5}, {2, 3}, {1, 1, 5, 5}}, ScoresLabelsMatrix(5));
  CheckGpuMatchesCpu(
      LayerParam(InfogainText("top: 'loss' top: 'prob' loss_weight: 2 loss_weight: 0")),
      {{3, 4, 2, 2}, {3, 1, 2, 2}, {1, 1, 4, 4}}, ScoresLabelsMatrix(4));
}

TEST(InfogainLossGpuTest, ManyPositions) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options = ScoresLabelsMatrix(5, 7, 0);
  options.tolerance = 1e-3f;
  CheckGpuMatchesCpu(LayerParam(InfogainText("loss_param { ignore_label: 0 }")),
                     {{4, 5, 100, 100}, {4, 100, 100}, {1, 1, 5, 5}}, options);
}

TEST(InfogainLossGpuTest, LabelOutOfRangeIsAnError) {
  CORTADO_REQUIRE_GPU();
  Tensor x({2, 3, 2}), label({2, 2}), h({1, 1, 3, 3});
  FillGaussian(&x);
  FillUniform(&h, 0.0f, 1.0f);
  const float labels[] = {0, 2, 1, 3};
  std::copy(labels, labels + 4, label.mutable_cpu_data());
  ExpectForwardError(InfogainText(), {&x, &label, &h},
                     "label value 3 at position 3 is outside [0, 3)");
}

TEST(InfogainLossGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    SCOPED_TRACE(mode);
    Context ctx(Device::Cuda(0), 1701);
    auto layer = CreateLayer(LayerParam(InfogainText(fmt::format(
                                 "loss_param {{ ignore_label: 1 normalization: {} }}", mode))),
                             &ctx);
    Tensor x({2, 3, 4}), label({2, 4}), h({1, 1, 3, 3}), loss;
    FillGaussian(&x, 0.0f, 1.0f, 5);
    FillIntegers(&label, 3, 9);
    FillUniform(&h, 0.0f, 2.0f, 6);
    label.mutable_cpu_data()[0] = 1.0f;
    GradientCheckOptions options;
    options.check_bottoms = {0};
    GradientChecker(options).Check(layer.get(), {&x, &label, &h}, {&loss});
  }
}

// --- MultinomialLogisticLoss ---

std::string MultinomialText(const std::string& extra = "") {
  return "name: 'mll' type: 'MultinomialLogisticLoss' bottom: 'p' bottom: 'l' " + extra;
}

GpuCheckOptions ProbabilitiesAndLabels(int classes) {
  GpuCheckOptions options;
  options.propagate_down = {true, false};
  options.fill_bottom = [=](int i, Tensor* t) {
    if (i == 0) {
      FillUniform(t, 0.05f, 1.0f, 3);
      t->mutable_cpu_data()[0] = 0.0f;  // clamped to 1e-20 if it is a label's
    } else {
      FillIntegers(t, classes, 4);
      t->mutable_cpu_data()[0] = 0.0f;
    }
  };
  return options;
}

TEST(MultinomialLogisticLossGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options = ProbabilitiesAndLabels(6);
  options.tolerance = 1e-4f;
  CheckGpuMatchesCpu(LayerParam(MultinomialText()), {{5, 6, 1, 1}, {5}}, options);
  CheckGpuMatchesCpu(LayerParam(MultinomialText("loss_weight: 0.3")), {{5, 6}, {5, 1, 1, 1}},
                     options);
  GpuCheckOptions many = ProbabilitiesAndLabels(1000);
  many.tolerance = 1e-3f;
  CheckGpuMatchesCpu(LayerParam(MultinomialText()), {{2000, 1000}, {2000}}, many);
}

TEST(MultinomialLogisticLossGpuTest, LabelOutOfRangeIsAnError) {
  CORTADO_REQUIRE_GPU();
  Tensor p({2, 3}), label({2});
  FillUniform(&p, 0.1f, 1.0f);
  label.mutable_cpu_data()[0] = -1.0f;
  ExpectForwardError(MultinomialText(), {&p, &label}, "label value -1 of sample 0");
}

TEST(MultinomialLogisticLossGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  auto layer = CreateLayer(LayerParam(MultinomialText()), &ctx);
  Tensor p({4, 5}), label({4}), loss;
  FillUniform(&p, 0.2f, 1.0f, 5);
  FillIntegers(&label, 5, 6);
  GradientCheckOptions options;
  options.check_bottoms = {0};
  options.step = 2e-3f;
  GradientChecker(options).Check(layer.get(), {&p, &label}, {&loss});
}

// --- BatchReindex ---

std::string ReindexText() {
  return "name: 'reindex' type: 'BatchReindex' bottom: 'data' bottom: 'idx'";
}

GpuCheckOptions DataAndIndices(int num) {
  GpuCheckOptions options;
  options.propagate_down = {true, false};
  options.fill_bottom = [=](int i, Tensor* t) {
    if (i == 0) {
      FillGaussian(t, 0.0f, 1.0f, 3);
    } else {
      FillIntegers(t, num, 4);
    }
  };
  return options;
}

TEST(BatchReindexGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam(ReindexText()), {{5, 3, 2}, {9}}, DataAndIndices(5));
  CheckGpuMatchesCpu(LayerParam(ReindexText()), {{6, 4}, {3}}, DataAndIndices(6));
  CheckGpuMatchesCpu(LayerParam(ReindexText()), {{6, 4}, {0}}, DataAndIndices(6));
  // Many repeats of few rows: the accumulation in Backward.
  CheckGpuMatchesCpu(LayerParam(ReindexText()), {{3, 64, 8}, {500}}, DataAndIndices(3));
}

TEST(BatchReindexGpuTest, IndexOutOfRangeIsAnError) {
  CORTADO_REQUIRE_GPU();
  Tensor data({3, 2}), index({2});
  index.mutable_cpu_data()[0] = 1.0f;
  index.mutable_cpu_data()[1] = 3.0f;
  ExpectForwardError(ReindexText(), {&data, &index}, "index 3 at position 1");
}

TEST(BatchReindexGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  auto layer = CreateLayer(LayerParam(ReindexText()), &ctx);
  Tensor data({4, 3}), index({6}), top;
  FillGaussian(&data, 0.0f, 1.0f, 3);
  const float picks[] = {3, 0, 3, 1, 3, 0};
  std::copy(picks, picks + 6, index.mutable_cpu_data());
  GradientCheckOptions options;
  options.check_bottoms = {0};
  GradientChecker(options).Check(layer.get(), {&data, &index}, {&top});
}

// --- Filter ---

std::string FilterText() {
  return "name: 'filter' type: 'Filter' bottom: 'a' bottom: 'b' bottom: 'selector' "
         "top: 'fa' top: 'fb'";
}

// Bottoms gaussian; the selector keeps the items whose index is in `keep` (none when empty).
GpuCheckOptions FilterInputs(std::vector<int> keep) {
  GpuCheckOptions options;
  options.propagate_down = {true, true, false};
  options.fill_bottom = [=](int i, Tensor* t) {
    if (i < 2) {
      FillGaussian(t, 0.0f, 1.0f, 3 + i);
      return;
    }
    std::fill_n(t->mutable_cpu_data(), t->count(), 0.0f);
    for (int k : keep) t->mutable_cpu_data()[k] = 1.0f;
  };
  return options;
}

TEST(FilterGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam(FilterText()), {{6, 3, 2}, {6}, {6, 1}}, FilterInputs({0, 2, 5}));
  CheckGpuMatchesCpu(LayerParam(FilterText()), {{4, 2}, {4, 5, 1}, {4}},
                     FilterInputs({0, 1, 2, 3}));
  CheckGpuMatchesCpu(LayerParam(FilterText()), {{4, 2}, {4, 5, 1}, {4}}, FilterInputs({}));
  std::vector<int> every_third;
  for (int k = 0; k < 3000; k += 3) every_third.push_back(k);
  CheckGpuMatchesCpu(LayerParam(FilterText()), {{3000, 50}, {3000, 2}, {3000, 1, 1, 1}},
                     FilterInputs(every_third));
}

TEST(FilterGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  auto layer = CreateLayer(LayerParam(FilterText()), &ctx);
  Tensor a({5, 2}), b({5, 3}), selector({5}), ta, tb;
  FillGaussian(&a, 0.0f, 1.0f, 1);
  FillGaussian(&b, 0.0f, 1.0f, 2);
  const float keep[] = {1, 0, 0, 1, 1};
  std::copy(keep, keep + 5, selector.mutable_cpu_data());
  GradientCheckOptions options;
  options.check_bottoms = {0, 1};
  GradientChecker(options).Check(layer.get(), {&a, &b, &selector}, {&ta, &tb});
  EXPECT_EQ(ta.shape(), (std::vector<int>{3, 2}));
}

}  // namespace
}  // namespace cortado::testing
