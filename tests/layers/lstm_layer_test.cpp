// SPDX-License-Identifier: Apache-2.0
#include "layers/lstm_layer.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "net/net.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(t->count(), static_cast<int>(values.size()));
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

std::string LstmText(int num_output, bool expose_hidden = false) {
  return fmt::format(
      "name: 'lstm' type: 'LSTM' recurrent_param {{ num_output: {} expose_hidden: {} "
      "weight_filler {{ type: 'uniform' min: -0.8 max: 0.8 }} "
      "bias_filler {{ type: 'uniform' min: -0.5 max: 0.5 }} }}",
      num_output, expose_hidden ? "true" : "false");
}

double Sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// The LSTM equations written out directly, with the weights read from the layer's blobs
// (W_xc, b_c, [W_xc_static], W_hc). h and c hold the initial states (N x D) on entry and the
// final ones on return; the outputs h_t go to `out` (T x N x D).
struct LstmReference {
  int T, N, I, D, S = 0;  // S: static input size (0: none)
  std::vector<double> w_xc, b_c, w_s, w_hc;

  LstmReference(Layer& layer, int t, int n, int i, int d, int s) : T(t), N(n), I(i), D(d), S(s) {
    auto copy = [](const Tensor& b) {
      return std::vector<double>(b.cpu_data(), b.cpu_data() + b.count());
    };
    const auto& blobs = layer.blobs();
    w_xc = copy(*blobs[0]);
    b_c = copy(*blobs[1]);
    if (S > 0) w_s = copy(*blobs[2]);
    w_hc = copy(*blobs[S > 0 ? 3 : 2]);
  }

  void Run(const float* x, const float* cont, const float* x_static, std::vector<double>* h,
           std::vector<double>* c, std::vector<double>* out) const {
    out->assign(static_cast<size_t>(T) * N * D, 0.0);
    for (int t = 0; t < T; ++t) {
      std::vector<double> h_next(N * D), c_next(N * D);
      for (int n = 0; n < N; ++n) {
        const double k = cont[t * N + n];
        std::vector<double> gate(4 * D);
        for (int j = 0; j < 4 * D; ++j) {
          double sum = b_c[j];
          for (int q = 0; q < I; ++q) sum += w_xc[j * I + q] * x[(t * N + n) * I + q];
          for (int q = 0; q < S; ++q) sum += w_s[j * S + q] * x_static[n * S + q];
          for (int e = 0; e < D; ++e) sum += w_hc[j * D + e] * k * (*h)[n * D + e];
          gate[j] = sum;
        }
        for (int d = 0; d < D; ++d) {
          const double i = Sig(gate[d]), f = Sig(gate[D + d]), o = Sig(gate[2 * D + d]);
          const double g = std::tanh(gate[3 * D + d]);
          c_next[n * D + d] = k * f * (*c)[n * D + d] + i * g;
          h_next[n * D + d] = o * std::tanh(c_next[n * D + d]);
          (*out)[(t * N + n) * D + d] = h_next[n * D + d];
        }
      }
      *h = h_next;
      *c = c_next;
    }
  }
};

void ExpectNear(const Tensor& actual, const std::vector<double>& expected, const char* what) {
  ASSERT_EQ(actual.count(), static_cast<int>(expected.size())) << what;
  for (int i = 0; i < actual.count(); ++i) {
    EXPECT_NEAR(actual.cpu_data()[i], expected[i], 1e-5) << what << " element " << i;
  }
}

constexpr int kT = 3, kN = 2, kI = 3, kD = 2;

// cont: every stream starts at t = 0; stream 1 starts a new sequence at t = 2.
const std::vector<float> kCont = {0, 0, 1, 1, 1, 0};

TEST(LSTMLayerTest, BlobsAndTopHaveCaffeShapes) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI, 1}), cont({kT, kN}), h;
  layer->Initialize({&x, &cont}, {&h});
  EXPECT_EQ(h.shape(), (std::vector<int>{kT, kN, kD}));
  ASSERT_EQ(layer->blobs().size(), 3u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{4 * kD, kI}));  // W_xc
  EXPECT_EQ(layer->blobs()[1]->shape(), (std::vector<int>{4 * kD}));      // b_c
  EXPECT_EQ(layer->blobs()[2]->shape(), (std::vector<int>{4 * kD, kD}));  // W_hc

  auto with_static = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x_static({kN, 5}), h2;
  with_static->Initialize({&x, &cont, &x_static}, {&h2});
  ASSERT_EQ(with_static->blobs().size(), 4u);
  EXPECT_EQ(with_static->blobs()[2]->shape(), (std::vector<int>{4 * kD, 5}));  // W_xc_static
  EXPECT_EQ(with_static->blobs()[3]->shape(), (std::vector<int>{4 * kD, kD}));
}

TEST(LSTMLayerTest, FillersComeFromRecurrentParam) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'lstm' type: 'LSTM' recurrent_param { num_output: 2 "
                                      "weight_filler { type: 'constant' value: 0.25 } "
                                      "bias_filler { type: 'constant' value: -1.5 } }"),
                           &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), h;
  layer->Initialize({&x, &cont}, {&h});
  for (int b : {0, 2}) {
    for (int i = 0; i < layer->blobs()[b]->count(); ++i) {
      EXPECT_EQ(layer->blobs()[b]->cpu_data()[i], 0.25f);
    }
  }
  for (int i = 0; i < layer->blobs()[1]->count(); ++i) {
    EXPECT_EQ(layer->blobs()[1]->cpu_data()[i], -1.5f);
  }
}

TEST(LSTMLayerTest, ForwardMatchesEquations) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), h;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  SetData(&cont, kCont);
  layer->Initialize({&x, &cont}, {&h});
  layer->Forward({&x, &cont}, {&h});
  LstmReference ref(*layer, kT, kN, kI, kD, 0);
  std::vector<double> h0(kN * kD, 0.0), c0(kN * kD, 0.0), out;
  ref.Run(x.cpu_data(), cont.cpu_data(), nullptr, &h0, &c0, &out);
  ExpectNear(h, out, "h");
  // The reset matters: stream 1 at t = 2 differs from a run that continues.
  std::vector<float> cont_on = kCont;
  cont_on[5] = 1.0f;
  std::vector<double> h1(kN * kD, 0.0), c1(kN * kD, 0.0), out_on;
  ref.Run(x.cpu_data(), cont_on.data(), nullptr, &h1, &c1, &out_on);
  EXPECT_GT(std::fabs(out_on[(2 * kN + 1) * kD] - out[(2 * kN + 1) * kD]), 1e-4);
}

TEST(LSTMLayerTest, ForwardWithStaticInputMatchesEquations) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), x_static({kN, 4}), h;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  testing::FillGaussian(&x_static, 0.0f, 1.0f, 6);
  SetData(&cont, kCont);
  layer->Initialize({&x, &cont, &x_static}, {&h});
  layer->Forward({&x, &cont, &x_static}, {&h});
  LstmReference ref(*layer, kT, kN, kI, kD, 4);
  std::vector<double> h0(kN * kD, 0.0), c0(kN * kD, 0.0), out;
  ref.Run(x.cpu_data(), cont.cpu_data(), x_static.cpu_data(), &h0, &c0, &out);
  ExpectNear(h, out, "h");
}

TEST(LSTMLayerTest, StateCarriesOverToTheNextForward) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), h;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  SetData(&cont, kCont);
  layer->Initialize({&x, &cont}, {&h});
  layer->Forward({&x, &cont}, {&h});
  LstmReference ref(*layer, kT, kN, kI, kD, 0);
  std::vector<double> hs(kN * kD, 0.0), cs(kN * kD, 0.0), out;
  ref.Run(x.cpu_data(), cont.cpu_data(), nullptr, &hs, &cs, &out);
  // The second batch continues every stream: it starts from the first one's final states.
  Tensor x2({kT, kN, kI});
  testing::FillGaussian(&x2, 0.0f, 1.0f, 8);
  SetData(&cont, std::vector<float>(kT * kN, 1.0f));
  layer->Forward({&x2, &cont}, {&h});
  ref.Run(x2.cpu_data(), cont.cpu_data(), nullptr, &hs, &cs, &out);
  ExpectNear(h, out, "h of the second batch");
  // Reset starts from zero states again.
  static_cast<RecurrentLayer*>(layer.get())->Reset();
  layer->Forward({&x2, &cont}, {&h});
  std::vector<double> h0(kN * kD, 0.0), c0(kN * kD, 0.0);
  ref.Run(x2.cpu_data(), cont.cpu_data(), nullptr, &h0, &c0, &out);
  ExpectNear(h, out, "h after Reset");
}

TEST(LSTMLayerTest, SingleTimeStepCarriesOver) {
  // T = 1: the unrolled net's one-top Slice and one-bottom Concat alias their blobs.
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({1, kN, kI}), cont({1, kN}), h;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  SetData(&cont, {0, 0});
  layer->Initialize({&x, &cont}, {&h});
  LstmReference ref(*layer, 1, kN, kI, kD, 0);
  std::vector<double> hs(kN * kD, 0.0), cs(kN * kD, 0.0), out;
  for (int pass = 0; pass < 3; ++pass) {
    testing::FillGaussian(&x, 0.0f, 1.0f, 10 + pass);
    layer->Forward({&x, &cont}, {&h});
    ref.Run(x.cpu_data(), cont.cpu_data(), nullptr, &hs, &cs, &out);
    ExpectNear(h, out, "h");
    SetData(&cont, {1, pass == 1 ? 0.0f : 1.0f});
  }
}

TEST(LSTMLayerTest, ExposeHiddenTakesAndGivesStates) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD, true)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), x_static({kN, 2}), h0({1, kN, kD}), c0({1, kN, kD});
  Tensor h, h_t, c_t;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  testing::FillGaussian(&x_static, 0.0f, 1.0f, 6);
  testing::FillGaussian(&h0, 0.0f, 1.0f, 7);
  testing::FillGaussian(&c0, 0.0f, 1.0f, 9);
  SetData(&cont, {1, 1, 1, 1, 1, 0});  // the initial states count; stream 1 resets at t = 2
  const std::vector<Tensor*> bottom = {&x, &cont, &x_static, &h0, &c0};
  const std::vector<Tensor*> top = {&h, &h_t, &c_t};
  EXPECT_EQ(layer->MinBottomBlobs(), 4);
  EXPECT_EQ(layer->ExactNumTopBlobs(), 3);
  layer->Initialize(bottom, top);
  EXPECT_EQ(h_t.shape(), (std::vector<int>{1, kN, kD}));
  EXPECT_EQ(c_t.shape(), (std::vector<int>{1, kN, kD}));
  LstmReference ref(*layer, kT, kN, kI, kD, 2);
  for (int pass = 0; pass < 2; ++pass) {  // no carry-over: both passes alike
    layer->Forward(bottom, top);
    std::vector<double> hs(h0.cpu_data(), h0.cpu_data() + h0.count());
    std::vector<double> cs(c0.cpu_data(), c0.cpu_data() + c0.count());
    std::vector<double> out;
    ref.Run(x.cpu_data(), cont.cpu_data(), x_static.cpu_data(), &hs, &cs, &out);
    ExpectNear(h, out, "h");
    ExpectNear(h_t, hs, "h_T");
    ExpectNear(c_t, cs, "c_T");
  }
}

TEST(LSTMLayerTest, BatchSizeMayChange) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), x_static({kN, 2}), h;
  layer->Initialize({&x, &cont, &x_static}, {&h});
  Tensor x3({kT, 3, kI}), cont3({kT, 3}), static3({3, 2});
  testing::FillGaussian(&x3, 0.0f, 1.0f, 5);
  testing::FillGaussian(&static3, 0.0f, 1.0f, 6);
  SetData(&cont3, {0, 0, 0, 1, 1, 1, 1, 0, 1});
  layer->Reshape({&x3, &cont3, &static3}, {&h});
  layer->Forward({&x3, &cont3, &static3}, {&h});
  EXPECT_EQ(h.shape(), (std::vector<int>{kT, 3, kD}));
  LstmReference ref(*layer, kT, 3, kI, kD, 2);
  std::vector<double> h0(3 * kD, 0.0), c0(3 * kD, 0.0), out;
  ref.Run(x3.cpu_data(), cont3.cpu_data(), static3.cpu_data(), &h0, &c0, &out);
  ExpectNear(h, out, "h");
}

TEST(LSTMLayerTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), h;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  SetData(&cont, kCont);  // cont = 0 at t = 0: the carried-over state does not matter
  testing::GradientCheckOptions options;
  options.check_bottoms = {0};
  testing::GradientChecker(options).Check(layer.get(), {&x, &cont}, {&h});
}

TEST(LSTMLayerTest, GradientWithStaticInputAndExposedStatesMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD, true)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), x_static({kN, 2}), h0({1, kN, kD}), c0({1, kN, kD});
  Tensor h, h_t, c_t;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  testing::FillGaussian(&x_static, 0.0f, 1.0f, 6);
  testing::FillGaussian(&h0, 0.0f, 1.0f, 7);
  testing::FillGaussian(&c0, 0.0f, 1.0f, 9);
  SetData(&cont, {1, 1, 1, 1, 1, 0});
  testing::GradientCheckOptions options;
  options.check_bottoms = {0, 2, 3, 4};  // all but cont; the objective includes h_T and c_T
  testing::GradientChecker(options).Check(layer.get(), {&x, &cont, &x_static, &h0, &c0},
                                          {&h, &h_t, &c_t});
}

TEST(LSTMLayerTest, ParamGradientsAccumulate) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), h;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  SetData(&cont, kCont);
  layer->Initialize({&x, &cont}, {&h});
  layer->Forward({&x, &cont}, {&h});
  std::fill_n(h.mutable_cpu_diff(), h.count(), 1.0f);
  for (auto& b : layer->blobs()) std::fill_n(b->mutable_cpu_diff(), b->count(), 0.0f);
  layer->Backward({&h}, {true, false}, {&x, &cont});
  std::vector<std::vector<float>> once;
  for (auto& b : layer->blobs()) once.emplace_back(b->cpu_diff(), b->cpu_diff() + b->count());
  layer->Backward({&h}, {true, false}, {&x, &cont});
  for (size_t k = 0; k < once.size(); ++k) {
    float norm = 0.0f;
    for (int i = 0; i < layer->blobs()[k]->count(); ++i) {
      EXPECT_NEAR(layer->blobs()[k]->cpu_diff()[i], 2.0f * once[k][i], 1e-5f) << k << " " << i;
      norm += std::fabs(once[k][i]);
    }
    EXPECT_GT(norm, 0.0f) << "param " << k;
  }
}

TEST(LSTMLayerTest, NoGradientWrittenToBottomsNotPropagated) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), h;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  SetData(&cont, kCont);
  layer->Initialize({&x, &cont}, {&h});
  layer->Forward({&x, &cont}, {&h});
  std::fill_n(h.mutable_cpu_diff(), h.count(), 1.0f);
  std::fill_n(x.mutable_cpu_diff(), x.count(), 7.0f);
  layer->Backward({&h}, {false, false}, {&x, &cont});
  for (int i = 0; i < x.count(); ++i) EXPECT_EQ(x.cpu_diff()[i], 7.0f);
  EXPECT_GT(layer->blobs()[0]->asum_diff(), 0.0f);
  try {
    layer->Backward({&h}, {true, true}, {&x, &cont});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'lstm' (LSTM)"), std::string::npos) << e.what();
  }
}

// Trains through a Net: the solver-facing parameters are the layer's blobs, the gradients
// land in the net's flat diff buffer, and weights survive ToProto / CopyTrainedLayersFrom and
// ShareTrainedLayersWith.
TEST(LSTMLayerTest, WorksInsideANet) {
  const std::string text = R"(
    name: 'seq'
    layer { name: 'in' type: 'Input' top: 'x' top: 'cont'
            input_param { shape { dim: 3 dim: 2 dim: 3 } shape { dim: 3 dim: 2 } } }
    layer { name: 'lstm' type: 'LSTM' bottom: 'x' bottom: 'cont' top: 'h' loss_weight: 1
            recurrent_param { num_output: 2
              weight_filler { type: 'uniform' min: -0.8 max: 0.8 }
              bias_filler { type: 'uniform' min: -0.5 max: 0.5 } } }
  )";
  caffe::NetParameter param = testing::NetParam(text);
  param.mutable_state()->set_phase(caffe::TRAIN);
  Context ctx(Device::Cpu(), 1701);
  Net net(param, &ctx);
  ASSERT_EQ(net.learnable_params().size(), 3u);
  Layer* layer = net.layer_by_name("lstm");
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(net.learnable_params()[i], layer->blobs()[i].get());
  testing::FillGaussian(net.blob_by_name("x"), 0.0f, 1.0f, 5);
  SetData(net.blob_by_name("cont"), kCont);
  net.ForwardBackward();

  // The same layer on its own, with the same weights and top diff 1 (the loss weight).
  auto alone = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), h;
  x.CopyFrom(*net.blob_by_name("x"));
  SetData(&cont, kCont);
  alone->Initialize({&x, &cont}, {&h});
  for (size_t i = 0; i < 3; ++i) alone->blobs()[i]->CopyFrom(*layer->blobs()[i]);
  alone->Forward({&x, &cont}, {&h});
  std::fill_n(h.mutable_cpu_diff(), h.count(), 1.0f);
  for (auto& b : alone->blobs()) std::fill_n(b->mutable_cpu_diff(), b->count(), 0.0f);
  alone->Backward({&h}, {false, false}, {&x, &cont});
  const float* flat = net.flat_cpu_diff();
  for (size_t i = 0; i < 3; ++i) {
    const Tensor& p = *net.learnable_params()[i];
    for (int j = 0; j < p.count(); ++j) {
      EXPECT_NEAR(p.cpu_diff()[j], alone->blobs()[i]->cpu_diff()[j], 1e-5f) << i << " " << j;
      EXPECT_EQ(flat[net.learnable_param_offsets()[i] + j], p.cpu_diff()[j]);
    }
  }
  ASSERT_GT(net.learnable_params()[2]->asum_diff(), 0.0f);

  // An update changes what the layer computes.
  const std::vector<float> before(net.blob_by_name("h")->cpu_data(),
                                  net.blob_by_name("h")->cpu_data() + kT * kN * kD);
  net.Update();
  net.Forward();
  float change = 0.0f;
  for (int i = 0; i < kT * kN * kD; ++i) {
    change += std::fabs(net.blob_by_name("h")->cpu_data()[i] - before[i]);
  }
  EXPECT_GT(change, 1e-4f);

  // Weights written out load into another net, which then computes the same.
  caffe::NetParameter trained;
  net.ToProto(&trained);
  ASSERT_EQ(trained.layer(1).blobs_size(), 3);
  EXPECT_EQ(trained.layer(1).blobs(0).shape().dim_size(), 2);
  caffe::NetParameter test_param = testing::NetParam(text);
  Net copy(test_param, &ctx);
  copy.CopyTrainedLayersFrom(trained);
  Net shared(test_param, &ctx);
  shared.ShareTrainedLayersWith(net);
  for (Net* other : {&copy, &shared}) {
    other->blob_by_name("x")->CopyFrom(*net.blob_by_name("x"));
    SetData(other->blob_by_name("cont"), kCont);
    other->Forward();
    for (int i = 0; i < kT * kN * kD; ++i) {
      EXPECT_NEAR(other->blob_by_name("h")->cpu_data()[i], net.blob_by_name("h")->cpu_data()[i],
                  1e-6f);
    }
  }
}

void ExpectSetupError(const std::vector<std::vector<int>>& shapes, const std::string& fragment,
                      bool expose_hidden = false, int num_output = kD) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(num_output, expose_hidden)), &ctx);
  std::vector<std::unique_ptr<Tensor>> store;
  std::vector<Tensor*> bottom, top;
  for (const auto& s : shapes) {
    store.push_back(std::make_unique<Tensor>(s));
    bottom.push_back(store.back().get());
  }
  for (int i = 0; i < (expose_hidden ? 3 : 1); ++i) {
    store.push_back(std::make_unique<Tensor>());
    top.push_back(store.back().get());
  }
  try {
    layer->Initialize(bottom, top);
    FAIL() << "no error for " << fragment;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'lstm' (LSTM)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(LSTMLayerTest, BadShapesAreErrors) {
  // cont must be T x N like x's first two axes.
  ExpectSetupError({{3, 2, 3}, {3, 3}}, "cont (bottom 1) has shape [3 3 (9)]");
  ExpectSetupError({{3, 2, 3}, {4, 2}}, "T x N = 3 x 2");
  ExpectSetupError({{3, 2, 3}, {3, 2, 1}}, "cont (bottom 1)");
  ExpectSetupError({{6}, {6, 1}}, "at least 2 axes");
  // The static input's first axis is N.
  ExpectSetupError({{3, 2, 3}, {3, 2}, {3, 5}}, "x_static (bottom 2) has shape [3 5 (15)]");
  // Exposed states are 1 x N x D.
  ExpectSetupError({{3, 2, 3}, {3, 2}, {1, 2, 2}, {1, 2, 3}}, "initial state c_0 (bottom 3)", true);
  ExpectSetupError({{3, 2, 3}, {3, 2}}, "num_output must be positive", false, 0);
}

TEST(LSTMLayerTest, ReshapeErrorsNameTheShapes) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(LstmText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), h;
  layer->Initialize({&x, &cont}, {&h});
  Tensor x4({4, kN, kI}), cont4({4, kN});
  try {
    layer->Reshape({&x4, &cont4}, {&h});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'lstm' (LSTM)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("set up for T = 3"), std::string::npos) << msg;
  }
  Tensor x_wide({kT, kN, kI + 1});
  try {
    layer->Reshape({&x_wide, &cont}, {&h});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("set up for 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cortado
