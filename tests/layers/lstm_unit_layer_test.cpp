// SPDX-License-Identifier: Apache-2.0
#include "layers/lstm_unit_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(t->count(), static_cast<int>(values.size()));
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

double Sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// N = 3 streams, D = 2: cont 1, 0 and 0.5.
struct UnitCase {
  Tensor c_prev{{1, 3, 2}};
  Tensor x{{1, 3, 8}};
  Tensor cont{{1, 3}};
  Tensor c, h;
  UnitCase() {
    SetData(&c_prev, {0.5f, -1.0f, 2.0f, 0.3f, -0.7f, 1.5f});
    SetData(&x,
            {0.1f,  -0.2f, 0.3f,  0.4f,  -0.5f, 0.6f,  0.7f,  -0.8f,  // stream 0: i i f f o o g g
             1.0f,  0.5f,  -1.0f, 2.0f,  0.2f,  0.0f,  -0.3f, 0.9f,   // stream 1
             -0.4f, 0.8f,  0.6f,  -1.2f, 1.1f,  -0.6f, 0.25f, -0.75f});
    SetData(&cont, {1.0f, 0.0f, 0.5f});
  }
  std::vector<Tensor*> bottom() { return {&c_prev, &x, &cont}; }
  std::vector<Tensor*> top() { return {&c, &h}; }
  // Gate pre-activation `gate` (0 i, 1 f, 2 o, 3 g) of stream n, unit d.
  double X(int n, int gate, int d) const { return x.cpu_data()[n * 8 + gate * 2 + d]; }
};

TEST(LSTMUnitLayerTest, TopsHaveCellShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'unit' type: 'LSTMUnit'"), &ctx);
  UnitCase u;
  layer->Initialize(u.bottom(), u.top());
  EXPECT_EQ(u.c.shape(), (std::vector<int>{1, 3, 2}));
  EXPECT_EQ(u.h.shape(), (std::vector<int>{1, 3, 2}));
}

TEST(LSTMUnitLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'unit' type: 'LSTMUnit'"), &ctx);
  UnitCase u;
  layer->Initialize(u.bottom(), u.top());
  layer->Forward(u.bottom(), u.top());
  std::vector<float> dc_top(6), dh_top(6);
  for (int k = 0; k < 6; ++k) {
    dc_top[k] = 0.1f * static_cast<float>(k) - 0.2f;
    dh_top[k] = 0.3f - 0.15f * static_cast<float>(k);
  }
  std::copy(dc_top.begin(), dc_top.end(), u.c.mutable_cpu_diff());
  std::copy(dh_top.begin(), dh_top.end(), u.h.mutable_cpu_diff());
  layer->Backward(u.top(), {true, true, false}, u.bottom());
  for (int n = 0; n < 3; ++n) {
    const double cont = u.cont.cpu_data()[n];
    for (int d = 0; d < 2; ++d) {
      const int k = n * 2 + d;
      const double i = Sig(u.X(n, 0, d)), f = Sig(u.X(n, 1, d)), o = Sig(u.X(n, 2, d));
      const double g = std::tanh(u.X(n, 3, d));
      const double c_prev = u.c_prev.cpu_data()[k];
      const double c = cont * f * c_prev + i * g;
      const double h = o * std::tanh(c);
      EXPECT_NEAR(u.c.cpu_data()[k], c, 1e-6) << "c " << k;
      EXPECT_NEAR(u.h.cpu_data()[k], h, 1e-6) << "h " << k;
      // Backward: the derivative of c and h with respect to each input.
      const double dc = dc_top[k] + dh_top[k] * o * (1.0 - std::tanh(c) * std::tanh(c));
      EXPECT_NEAR(u.c_prev.cpu_diff()[k], dc * cont * f, 1e-6) << "dc_prev " << k;
      const float* dx = u.x.cpu_diff() + n * 8;
      EXPECT_NEAR(dx[d], dc * g * i * (1 - i), 1e-6) << "di " << k;
      EXPECT_NEAR(dx[2 + d], dc * cont * c_prev * f * (1 - f), 1e-6) << "df " << k;
      EXPECT_NEAR(dx[4 + d], dh_top[k] * std::tanh(c) * o * (1 - o), 1e-6) << "do " << k;
      EXPECT_NEAR(dx[6 + d], dc * i * (1 - g * g), 1e-6) << "dg " << k;
    }
  }
}

TEST(LSTMUnitLayerTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'unit' type: 'LSTMUnit'"), &ctx);
  Tensor c_prev({1, 4, 3}), x({1, 4, 12}), cont({1, 4}), c, h;
  testing::FillGaussian(&c_prev, 0.0f, 1.0f, 3);
  testing::FillGaussian(&x, 0.0f, 1.0f, 4);
  SetData(&cont, {1.0f, 0.0f, 0.5f, 1.0f});  // non-binary cont too: the gradient is exact
  testing::GradientCheckOptions options;
  options.check_bottoms = {0, 1};
  testing::GradientChecker(options).Check(layer.get(), {&c_prev, &x, &cont}, {&c, &h});
}

TEST(LSTMUnitLayerTest, GradientToContIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'unit' type: 'LSTMUnit'"), &ctx);
  UnitCase u;
  layer->Initialize(u.bottom(), u.top());
  layer->Forward(u.bottom(), u.top());
  EXPECT_FALSE(layer->AllowForceBackward(2));
  try {
    layer->Backward(u.top(), {true, true, true}, u.bottom());
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'unit'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("continuation"), std::string::npos) << msg;
  }
}

void ExpectShapeError(const std::vector<int>& c_shape, const std::vector<int>& x_shape,
                      const std::vector<int>& cont_shape, const std::string& fragment) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'unit' type: 'LSTMUnit'"), &ctx);
  Tensor c_prev(c_shape), x(x_shape), cont(cont_shape), c, h;
  try {
    layer->Initialize({&c_prev, &x, &cont}, {&c, &h});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'unit' (LSTMUnit)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

TEST(LSTMUnitLayerTest, BadShapesAreErrors) {
  ExpectShapeError({1, 2, 3}, {1, 2, 11}, {1, 2}, "4 times");
  ExpectShapeError({1, 2, 3}, {1, 3, 12}, {1, 2}, "number of streams");
  ExpectShapeError({1, 2, 3}, {1, 2, 12}, {1, 3}, "number of streams");
  ExpectShapeError({2, 2, 3}, {2, 2, 12}, {2, 2}, "single time step");
  ExpectShapeError({1, 2, 3}, {1, 2, 12}, {1, 2, 1}, "cont 2");
}

}  // namespace
}  // namespace cortado
