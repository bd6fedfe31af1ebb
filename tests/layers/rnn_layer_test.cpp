// SPDX-License-Identifier: Apache-2.0
#include "layers/rnn_layer.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
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

std::string RnnText(int num_output, bool expose_hidden = false) {
  return fmt::format(
      "name: 'rnn' type: 'RNN' recurrent_param {{ num_output: {} expose_hidden: {} "
      "weight_filler {{ type: 'uniform' min: -0.8 max: 0.8 }} "
      "bias_filler {{ type: 'uniform' min: -0.5 max: 0.5 }} }}",
      num_output, expose_hidden ? "true" : "false");
}

// The RNN equations written out directly, with the weights read from the layer's blobs
// (W_xh, b_h, [W_xh_static], W_hh, W_ho, b_o):
//   h_t = tanh(W_hh (cont_t h_{t-1}) + W_xh x_t + b_h + W_xh_static x_static)
//   o_t = tanh(W_ho h_t + b_o)
// h holds the initial state (N x D) on entry and the final one on return; o_t go to `out`.
struct RnnReference {
  int T, N, I, D, S = 0;
  std::vector<double> w_xh, b_h, w_s, w_hh, w_ho, b_o;

  RnnReference(Layer& layer, int t, int n, int i, int d, int s) : T(t), N(n), I(i), D(d), S(s) {
    auto copy = [](const Tensor& b) {
      return std::vector<double>(b.cpu_data(), b.cpu_data() + b.count());
    };
    const auto& blobs = layer.blobs();
    const int k = S > 0 ? 1 : 0;
    w_xh = copy(*blobs[0]);
    b_h = copy(*blobs[1]);
    if (S > 0) w_s = copy(*blobs[2]);
    w_hh = copy(*blobs[2 + k]);
    w_ho = copy(*blobs[3 + k]);
    b_o = copy(*blobs[4 + k]);
  }

  void Run(const float* x, const float* cont, const float* x_static, std::vector<double>* h,
           std::vector<double>* out) const {
    out->assign(static_cast<size_t>(T) * N * D, 0.0);
    for (int t = 0; t < T; ++t) {
      std::vector<double> h_next(N * D);
      for (int n = 0; n < N; ++n) {
        const double k = cont[t * N + n];
        for (int j = 0; j < D; ++j) {
          double sum = b_h[j];
          for (int q = 0; q < I; ++q) sum += w_xh[j * I + q] * x[(t * N + n) * I + q];
          for (int q = 0; q < S; ++q) sum += w_s[j * S + q] * x_static[n * S + q];
          for (int e = 0; e < D; ++e) sum += w_hh[j * D + e] * k * (*h)[n * D + e];
          h_next[n * D + j] = std::tanh(sum);
        }
        for (int j = 0; j < D; ++j) {
          double sum = b_o[j];
          for (int e = 0; e < D; ++e) sum += w_ho[j * D + e] * h_next[n * D + e];
          (*out)[(t * N + n) * D + j] = std::tanh(sum);
        }
      }
      *h = h_next;
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

TEST(RNNLayerTest, BlobsAndTopHaveCaffeShapes) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(RnnText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), o;
  layer->Initialize({&x, &cont}, {&o});
  EXPECT_EQ(o.shape(), (std::vector<int>{kT, kN, kD}));
  const std::vector<std::vector<int>> shapes = {{kD, kI}, {kD}, {kD, kD}, {kD, kD}, {kD}};
  ASSERT_EQ(layer->blobs().size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(layer->blobs()[i]->shape(), shapes[i]);

  auto with_static = CreateLayer(LayerParam(RnnText(kD)), &ctx);
  Tensor x_static({kN, 2, 2}), o2;
  with_static->Initialize({&x, &cont, &x_static}, {&o2});
  const std::vector<std::vector<int>> static_shapes = {{kD, kI}, {kD},     {kD, 4},
                                                       {kD, kD}, {kD, kD}, {kD}};
  ASSERT_EQ(with_static->blobs().size(), static_shapes.size());
  for (size_t i = 0; i < static_shapes.size(); ++i) {
    EXPECT_EQ(with_static->blobs()[i]->shape(), static_shapes[i]);
  }
}

TEST(RNNLayerTest, ForwardMatchesEquations) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(RnnText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), o;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  SetData(&cont, kCont);
  layer->Initialize({&x, &cont}, {&o});
  layer->Forward({&x, &cont}, {&o});
  RnnReference ref(*layer, kT, kN, kI, kD, 0);
  std::vector<double> h(kN * kD, 0.0), out;
  ref.Run(x.cpu_data(), cont.cpu_data(), nullptr, &h, &out);
  ExpectNear(o, out, "o");
  // The reset matters: stream 1 at t = 2 differs from a run that continues.
  std::vector<float> cont_on = kCont;
  cont_on[5] = 1.0f;
  std::vector<double> h1(kN * kD, 0.0), out_on;
  ref.Run(x.cpu_data(), cont_on.data(), nullptr, &h1, &out_on);
  EXPECT_GT(std::fabs(out_on[(2 * kN + 1) * kD] - out[(2 * kN + 1) * kD]), 1e-4);
}

TEST(RNNLayerTest, ForwardWithStaticInputMatchesEquations) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(RnnText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), x_static({kN, 4}), o;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  testing::FillGaussian(&x_static, 0.0f, 1.0f, 6);
  SetData(&cont, kCont);
  layer->Initialize({&x, &cont, &x_static}, {&o});
  layer->Forward({&x, &cont, &x_static}, {&o});
  RnnReference ref(*layer, kT, kN, kI, kD, 4);
  std::vector<double> h(kN * kD, 0.0), out;
  ref.Run(x.cpu_data(), cont.cpu_data(), x_static.cpu_data(), &h, &out);
  ExpectNear(o, out, "o");
}

TEST(RNNLayerTest, StateCarriesOverToTheNextForward) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(RnnText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), o;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  SetData(&cont, kCont);
  layer->Initialize({&x, &cont}, {&o});
  layer->Forward({&x, &cont}, {&o});
  RnnReference ref(*layer, kT, kN, kI, kD, 0);
  std::vector<double> h(kN * kD, 0.0), out;
  ref.Run(x.cpu_data(), cont.cpu_data(), nullptr, &h, &out);
  Tensor x2({kT, kN, kI});
  testing::FillGaussian(&x2, 0.0f, 1.0f, 8);
  SetData(&cont, std::vector<float>(kT * kN, 1.0f));
  layer->Forward({&x2, &cont}, {&o});
  ref.Run(x2.cpu_data(), cont.cpu_data(), nullptr, &h, &out);
  ExpectNear(o, out, "o of the second batch");
  static_cast<RecurrentLayer*>(layer.get())->Reset();
  layer->Forward({&x2, &cont}, {&o});
  std::vector<double> h0(kN * kD, 0.0);
  ref.Run(x2.cpu_data(), cont.cpu_data(), nullptr, &h0, &out);
  ExpectNear(o, out, "o after Reset");
}

TEST(RNNLayerTest, ExposeHiddenTakesAndGivesState) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(RnnText(kD, true)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), h0({1, kN, kD}), o, h_t;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  testing::FillGaussian(&h0, 0.0f, 1.0f, 7);
  SetData(&cont, {1, 1, 1, 1, 1, 0});
  EXPECT_EQ(layer->MinBottomBlobs(), 3);
  EXPECT_EQ(layer->ExactNumTopBlobs(), 2);
  layer->Initialize({&x, &cont, &h0}, {&o, &h_t});
  EXPECT_EQ(h_t.shape(), (std::vector<int>{1, kN, kD}));
  RnnReference ref(*layer, kT, kN, kI, kD, 0);
  for (int pass = 0; pass < 2; ++pass) {
    layer->Forward({&x, &cont, &h0}, {&o, &h_t});
    std::vector<double> h(h0.cpu_data(), h0.cpu_data() + h0.count()), out;
    ref.Run(x.cpu_data(), cont.cpu_data(), nullptr, &h, &out);
    ExpectNear(o, out, "o");
    ExpectNear(h_t, h, "h_T");
  }
}

TEST(RNNLayerTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(RnnText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), o;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  SetData(&cont, kCont);
  testing::GradientCheckOptions options;
  options.check_bottoms = {0};
  testing::GradientChecker(options).Check(layer.get(), {&x, &cont}, {&o});
}

TEST(RNNLayerTest, GradientWithStaticInputAndExposedStateMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(RnnText(kD, true)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), x_static({kN, 2}), h0({1, kN, kD}), o, h_t;
  testing::FillGaussian(&x, 0.0f, 1.0f, 5);
  testing::FillGaussian(&x_static, 0.0f, 1.0f, 6);
  testing::FillGaussian(&h0, 0.0f, 1.0f, 7);
  SetData(&cont, {1, 1, 1, 1, 1, 0});
  testing::GradientCheckOptions options;
  options.check_bottoms = {0, 2, 3};  // all but cont; the objective includes h_T
  testing::GradientChecker(options).Check(layer.get(), {&x, &cont, &x_static, &h0}, {&o, &h_t});
}

TEST(RNNLayerTest, WorksInsideANet) {
  const std::string text = R"(
    name: 'seq'
    layer { name: 'in' type: 'Input' top: 'x' top: 'cont'
            input_param { shape { dim: 3 dim: 2 dim: 3 } shape { dim: 3 dim: 2 } } }
    layer { name: 'rnn' type: 'RNN' bottom: 'x' bottom: 'cont' top: 'o' loss_weight: 1
            recurrent_param { num_output: 2
              weight_filler { type: 'uniform' min: -0.8 max: 0.8 }
              bias_filler { type: 'uniform' min: -0.5 max: 0.5 } } }
  )";
  caffe::NetParameter param = testing::NetParam(text);
  param.mutable_state()->set_phase(caffe::TRAIN);
  Context ctx(Device::Cpu(), 1701);
  Net net(param, &ctx);
  ASSERT_EQ(net.learnable_params().size(), 5u);
  Layer* layer = net.layer_by_name("rnn");
  testing::FillGaussian(net.blob_by_name("x"), 0.0f, 1.0f, 5);
  SetData(net.blob_by_name("cont"), kCont);
  net.ForwardBackward();

  auto alone = CreateLayer(LayerParam(RnnText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), o;
  x.CopyFrom(*net.blob_by_name("x"));
  SetData(&cont, kCont);
  alone->Initialize({&x, &cont}, {&o});
  for (size_t i = 0; i < 5; ++i) alone->blobs()[i]->CopyFrom(*layer->blobs()[i]);
  alone->Forward({&x, &cont}, {&o});
  std::fill_n(o.mutable_cpu_diff(), o.count(), 1.0f);
  for (auto& b : alone->blobs()) std::fill_n(b->mutable_cpu_diff(), b->count(), 0.0f);
  alone->Backward({&o}, {false, false}, {&x, &cont});
  for (size_t i = 0; i < 5; ++i) {
    const Tensor& p = *net.learnable_params()[i];
    EXPECT_EQ(&p, layer->blobs()[i].get());
    EXPECT_GT(p.asum_diff(), 0.0f) << i;
    for (int j = 0; j < p.count(); ++j) {
      EXPECT_NEAR(p.cpu_diff()[j], alone->blobs()[i]->cpu_diff()[j], 1e-5f) << i << " " << j;
      EXPECT_EQ(net.flat_cpu_diff()[net.learnable_param_offsets()[i] + j], p.cpu_diff()[j]);
    }
  }
}

void ExpectSetupError(const std::vector<std::vector<int>>& shapes, const std::string& fragment,
                      bool expose_hidden = false) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(RnnText(kD, expose_hidden)), &ctx);
  std::vector<std::unique_ptr<Tensor>> store;
  std::vector<Tensor*> bottom, top;
  for (const auto& s : shapes) {
    store.push_back(std::make_unique<Tensor>(s));
    bottom.push_back(store.back().get());
  }
  for (int i = 0; i < (expose_hidden ? 2 : 1); ++i) {
    store.push_back(std::make_unique<Tensor>());
    top.push_back(store.back().get());
  }
  try {
    layer->Initialize(bottom, top);
    FAIL() << "no error for " << fragment;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'rnn' (RNN)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(RNNLayerTest, BadShapesAreErrors) {
  ExpectSetupError({{3, 2, 3}, {3, 3}}, "cont (bottom 1) has shape [3 3 (9)]");
  ExpectSetupError({{3, 2, 3}, {2, 2}}, "T x N = 3 x 2");
  ExpectSetupError({{3, 2, 3}, {3, 2}, {4, 5}}, "x_static (bottom 2) has shape [4 5 (20)]");
  ExpectSetupError({{3, 2, 3}, {3, 2}, {1, 3, 2}}, "initial state h_0 (bottom 2)", true);
  // Too many bottoms for expose_hidden: x, cont, x_static, h_0 at most.
  ExpectSetupError({{3, 2, 3}, {3, 2}, {2, 4}, {1, 2, 2}, {1, 2, 2}}, "at most 4 bottom", true);
}

TEST(RNNLayerTest, ChangingTIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(RnnText(kD)), &ctx);
  Tensor x({kT, kN, kI}), cont({kT, kN}), x_static({kN, 2}), o;
  layer->Initialize({&x, &cont, &x_static}, {&o});
  Tensor x2({2, kN, kI}), cont2({2, kN});
  try {
    layer->Reshape({&x2, &cont2, &x_static}, {&o});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'rnn' (RNN)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("set up for T = 3"), std::string::npos) << msg;
  }
  Tensor static3({3, 2});  // N = 3 against x's N = 2
  EXPECT_THROW(layer->Reshape({&x, &cont, &static3}, {&o}), Error);
}

}  // namespace
}  // namespace cortado
