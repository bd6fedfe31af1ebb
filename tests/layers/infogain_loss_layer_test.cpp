// SPDX-License-Identifier: Apache-2.0
#include "layers/infogain_loss_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "data/data_test_util.hpp"
#include "io/proto_io.hpp"
#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::SetData;

std::unique_ptr<Layer> MakeLoss(Context* ctx, const std::string& extra = "",
                                bool third_bottom = true) {
  return CreateLayer(
      testing::LayerParam(std::string("name: 'info' type: 'InfogainLoss' bottom: 'x' "
                                      "bottom: 'l' ") +
                          (third_bottom ? "bottom: 'H' " : "") + extra),
      ctx);
}

// The loss written out from its definition, in double: softmax along `axis` (outer x k x
// inner), -sum_c H[l, c] log(max(p_c, 1e-20)) per counted position, over the normalizer.
double ReferenceLoss(const Tensor& x, const Tensor& label, const Tensor& h, int axis,
                     const std::string& mode, bool has_ignore, int ignore) {
  const int outer = x.count(0, axis), k = x.shape(axis), inner = x.count(axis + 1);
  double sum = 0.0;
  int valid = 0;
  for (int i = 0; i < outer; ++i) {
    for (int j = 0; j < inner; ++j) {
      const int l = static_cast<int>(label.cpu_data()[i * inner + j]);
      if (has_ignore && l == ignore) continue;
      double max_x = -1e30, z = 0.0;
      for (int c = 0; c < k; ++c)
        max_x = std::max<double>(max_x, x.cpu_data()[(i * k + c) * inner + j]);
      for (int c = 0; c < k; ++c) z += std::exp(x.cpu_data()[(i * k + c) * inner + j] - max_x);
      for (int c = 0; c < k; ++c) {
        const double p = std::exp(x.cpu_data()[(i * k + c) * inner + j] - max_x) / z;
        sum -= h.cpu_data()[l * k + c] * std::log(std::max(p, 1e-20));
      }
      ++valid;
    }
  }
  double normalizer = 1.0;
  if (mode == "FULL") normalizer = outer * inner;
  if (mode == "VALID") normalizer = valid;
  if (mode == "BATCH_SIZE") normalizer = outer;
  return sum / std::max(1.0, normalizer);
}

// Two samples, K = 3; scores (1, 2, 3) and (0, 0, 0); labels (2, 0);
// H = [[1, 0.5, 0], [0, 1, 0], [0.2, 0.3, 0.5]].
struct HandCase {
  Tensor x{std::vector<int>{2, 3}};
  Tensor label{std::vector<int>{2}};
  Tensor h{std::vector<int>{1, 1, 3, 3}};
  HandCase() {
    SetData(&x, {1, 2, 3, 0, 0, 0});
    SetData(&label, {2, 0});
    SetData(&h, {1, 0.5f, 0, 0, 1, 0, 0.2f, 0.3f, 0.5f});
  }
  std::vector<Tensor*> bottom() { return {&x, &label, &h}; }
};

TEST(InfogainLossLayerTest, TopsAndFlags) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  HandCase c;
  Tensor loss, prob;
  layer->Initialize(c.bottom(), {&loss, &prob});
  EXPECT_EQ(loss.num_axes(), 0);
  EXPECT_EQ(prob.shape(), c.x.shape());
  EXPECT_EQ(layer->loss(0), 1.0f);
  EXPECT_EQ(layer->loss(1), 0.0f);
  EXPECT_TRUE(layer->AllowForceBackward(0));
  EXPECT_FALSE(layer->AllowForceBackward(1));
  EXPECT_FALSE(layer->AllowForceBackward(2));
}

TEST(InfogainLossLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx);
  HandCase c;
  Tensor loss, prob;
  layer->Initialize(c.bottom(), {&loss, &prob});
  const float weighted = layer->Forward(c.bottom(), {&loss, &prob});
  // log softmax(1, 2, 3) = (1, 2, 3) - 3.4076060; sample 0 takes row 2 of H:
  //   -(0.2 (-2.4076060) + 0.3 (-1.4076060) + 0.5 (-0.4076060)) = 1.1076060
  // sample 1 takes row 0: -(1 + 0.5) log(1/3) = 1.6479184. VALID: over 2.
  EXPECT_NEAR(loss.cpu_data()[0], (1.1076060f + 1.6479184f) / 2, 1e-5f);
  EXPECT_NEAR(weighted, loss.cpu_data()[0], 1e-7f);
  const std::vector<float> p0 = {0.0900306f, 0.2447285f, 0.6652410f};
  for (int c2 = 0; c2 < 3; ++c2) {
    EXPECT_NEAR(prob.cpu_data()[c2], p0[c2], 1e-6f);
    EXPECT_NEAR(prob.cpu_data()[3 + c2], 1.0f / 3, 1e-6f);
  }
  layer->Backward({&loss, &prob}, {true, false, false}, c.bottom());
  // (p sum_j H[l, j] - H[l, :]) / 2: row sums 1 (row 2) and 1.5 (row 0).
  const std::vector<float> expected = {
      (p0[0] - 0.2f) / 2, (p0[1] - 0.3f) / 2, (p0[2] - 0.5f) / 2, -0.25f, 0.0f, 0.25f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(c.x.cpu_diff()[i], expected[i], 1e-6f) << i;
}

void RandomLabels(Tensor* label, int classes, unsigned seed) {
  std::mt19937 rng(seed);
  float* l = label->mutable_cpu_data();
  for (int i = 0; i < label->count(); ++i) l[i] = static_cast<float>(rng() % classes);
}

TEST(InfogainLossLayerTest, MatchesReferenceEachNormalizationAndAxis) {
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    for (int axis : {1, 2}) {
      SCOPED_TRACE(std::string(mode) + " axis " + std::to_string(axis));
      Context ctx(Device::Cpu(), 1701);
      auto layer =
          MakeLoss(&ctx, "infogain_loss_param { axis: " + std::to_string(axis) +
                             " } loss_param { ignore_label: 1 normalization: " + mode + " }");
      Tensor x({2, 3, 4}), label(axis == 1 ? std::vector<int>{2, 4} : std::vector<int>{2, 3});
      const int k = axis == 1 ? 3 : 4;
      Tensor h({1, 1, k, k}), loss;
      testing::FillGaussian(&x, 0.0f, 2.0f, 3);
      testing::FillUniform(&h, 0.0f, 1.0f, 4);
      RandomLabels(&label, k, 5);
      label.mutable_cpu_data()[0] = 1;  // one ignored position at least
      label.mutable_cpu_data()[1] = 0;  // one counted position at least
      layer->Initialize({&x, &label, &h}, {&loss});
      layer->Forward({&x, &label, &h}, {&loss});
      EXPECT_NEAR(loss.cpu_data()[0], ReferenceLoss(x, label, h, axis, mode, true, 1), 1e-5);
    }
  }
}

// With H = I the loss is SoftmaxWithLoss's, and so is the gradient.
TEST(InfogainLossLayerTest, IdentityMatrixIsSoftmaxWithLoss) {
  Context ctx(Device::Cpu(), 1701);
  auto info = MakeLoss(&ctx);
  auto softmax_loss = CreateLayer(
      testing::LayerParam("name: 'swl' type: 'SoftmaxWithLoss' bottom: 'x' bottom: 'l'"), &ctx);
  Tensor x({3, 4, 2}), x2({3, 4, 2}), label({3, 2}), h({1, 1, 4, 4}), loss, loss2;
  testing::FillGaussian(&x, 0.0f, 1.0f, 7);
  x2.CopyFrom(x);
  RandomLabels(&label, 4, 8);
  for (int r = 0; r < 4; ++r) h.mutable_cpu_data()[r * 5] = 1.0f;
  info->Initialize({&x, &label, &h}, {&loss});
  softmax_loss->Initialize({&x2, &label}, {&loss2});
  info->Forward({&x, &label, &h}, {&loss});
  softmax_loss->Forward({&x2, &label}, {&loss2});
  EXPECT_NEAR(loss.cpu_data()[0], loss2.cpu_data()[0], 1e-5f);
  info->Backward({&loss}, {true, false, false}, {&x, &label, &h});
  softmax_loss->Backward({&loss2}, {true, false}, {&x2, &label});
  for (int i = 0; i < x.count(); ++i) EXPECT_NEAR(x.cpu_diff()[i], x2.cpu_diff()[i], 1e-6f) << i;
}

TEST(InfogainLossLayerTest, MatrixFromSourceFile) {
  testing::TempDir dir;
  HandCase c;
  caffe::BlobProto proto;
  c.h.ToProto(&proto);
  const std::string file = dir.path() + "/H.binaryproto";
  io::WriteProtoToBinaryFile(proto, file);

  Context ctx(Device::Cpu(), 1701);
  auto from_file =
      MakeLoss(&ctx, "infogain_loss_param { source: '" + file + "' }", /*third_bottom=*/false);
  auto from_bottom = MakeLoss(&ctx);
  Tensor x2({2, 3}), loss, loss2;
  x2.CopyFrom(c.x);
  from_file->Initialize({&x2, &c.label}, {&loss2});
  from_bottom->Initialize(c.bottom(), {&loss});
  from_file->Forward({&x2, &c.label}, {&loss2});
  from_bottom->Forward(c.bottom(), {&loss});
  EXPECT_NEAR(loss2.cpu_data()[0], (1.1076060f + 1.6479184f) / 2, 1e-5f);
  EXPECT_FLOAT_EQ(loss2.cpu_data()[0], loss.cpu_data()[0]);
  from_file->Backward({&loss2}, {true, false}, {&x2, &c.label});
  from_bottom->Backward({&loss}, {true, false, false}, c.bottom());
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(x2.cpu_diff()[i], c.x.cpu_diff()[i]) << i;
}

TEST(InfogainLossLayerTest, AllIgnoredGivesZero) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLoss(&ctx, "loss_param { ignore_label: 5 }");
  HandCase c;
  SetData(&c.label, {5, 5});
  Tensor loss;
  layer->Initialize(c.bottom(), {&loss});
  layer->Forward(c.bottom(), {&loss});
  EXPECT_EQ(loss.cpu_data()[0], 0.0f);
  layer->Backward({&loss}, {true, false, false}, c.bottom());
  EXPECT_EQ(c.x.asum_diff(), 0.0f);
}

TEST(InfogainLossLayerTest, GradientEachNormalization) {
  for (const char* mode : {"FULL", "VALID", "BATCH_SIZE", "NONE"}) {
    SCOPED_TRACE(mode);
    Context ctx(Device::Cpu(), 1701);
    auto layer =
        MakeLoss(&ctx, std::string("loss_param { ignore_label: 2 normalization: ") + mode + " }");
    Tensor x({2, 3, 2, 2}), label({2, 1, 2, 2}), h({1, 1, 3, 3}), loss;
    testing::FillGaussian(&x, 0.0f, 1.0f, 9);
    testing::FillUniform(&h, 0.0f, 2.0f, 10);
    RandomLabels(&label, 3, 11);
    label.mutable_cpu_data()[0] = 2;
    testing::GradientCheckOptions options;
    options.check_bottoms = {0};
    testing::GradientChecker(options).Check(layer.get(), {&x, &label, &h}, {&loss});
  }
}

void ExpectError(const std::function<void()>& run, const std::string& needle) {
  try {
    run();
    FAIL() << "no error; wanted " << needle;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("layer 'info' (InfogainLoss)"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(InfogainLossLayerTest, Errors) {
  Context ctx(Device::Cpu(), 1701);
  HandCase c;
  Tensor loss;
  ExpectError(
      [&] {
        MakeLoss(&ctx, "", false)->Initialize({&c.x, &c.label}, {&loss});
      },
      "infogain_loss_param.source");
  ExpectError(
      [&] { MakeLoss(&ctx, "loss_param { normalize: true }")->Initialize(c.bottom(), {&loss}); },
      "normalization");
  ExpectError(
      [&] {
        Tensor h({1, 1, 2, 2});
        MakeLoss(&ctx)->Initialize({&c.x, &c.label, &h}, {&loss});
      },
      "3 x 3");
  ExpectError(
      [&] {
        Tensor label({3});
        MakeLoss(&ctx)->Initialize({&c.x, &label, &c.h}, {&loss});
      },
      "first dimension");
  ExpectError(
      [&] {
        SetData(&c.label, {2, 3});
        auto layer = MakeLoss(&ctx);
        layer->Initialize(c.bottom(), {&loss});
        layer->Forward(c.bottom(), {&loss});
      },
      "label value 3 at position 1 is outside [0, 3)");
  SetData(&c.label, {2, 0});
  auto layer = MakeLoss(&ctx);
  layer->Initialize(c.bottom(), {&loss});
  layer->Forward(c.bottom(), {&loss});
  ExpectError([&] { layer->Backward({&loss}, {true, true, false}, c.bottom()); }, "label");
  ExpectError([&] { layer->Backward({&loss}, {true, false, true}, c.bottom()); }, "infogain");
}

TEST(InfogainLossLayerTest, MissingSourceFileIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  HandCase c;
  Tensor loss;
  auto layer =
      MakeLoss(&ctx, "infogain_loss_param { source: '/nonexistent/H.binaryproto' }", false);
  try {
    layer->Initialize({&c.x, &c.label}, {&loss});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("layer 'info' (InfogainLoss)"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/H.binaryproto"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace cortado
