// SPDX-License-Identifier: Apache-2.0
#include "layers/power_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

std::string PowerText(float power, float scale, float shift) {
  return fmt::format("name: 'pow' type: 'Power' power_param {{ power: {} scale: {} shift: {} }}",
                     power, scale, shift);
}

// Runs forward and backward (top diff 1) on `x`; checks y and dy/dx against `y`, `dydx`.
void ExpectByHand(const std::string& text, const std::vector<float>& x, const std::vector<float>& y,
                  const std::vector<float>& dydx) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(text), &ctx);
  const int n = static_cast<int>(x.size());
  Tensor bottom({n}), top;
  testing::SetData(&bottom, x);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  for (int i = 0; i < n; ++i) EXPECT_NEAR(top.cpu_data()[i], y[i], 1e-5f) << text << " y " << i;
  std::fill_n(top.mutable_cpu_diff(), n, 1.0f);
  layer->Backward({&top}, {true}, {&bottom});
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(bottom.cpu_diff()[i], dydx[i], 1e-5f) << text << " dx " << i;
  }
}

TEST(PowerLayerTest, TopHasBottomShape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'pow' type: 'Power'"), &ctx);
  Tensor bottom({2, 3, 4}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), bottom.shape());
}

TEST(PowerLayerTest, ForwardAndBackwardByHand) {
  // power 1: y = 3x - 1, dy/dx = 3
  ExpectByHand(PowerText(1, 3, -1), {0, 2}, {-1, 5}, {3, 3});
  // power 2: y = (1 + x/2)^2 at 0, 2, -4 is 1, 4, 1; dy/dx = 2 * 0.5 * (1 + x/2) = 1, 2, -1
  ExpectByHand(PowerText(2, 0.5f, 1), {0, 2, -4}, {1, 4, 1}, {1, 2, -1});
  // power 0.5, no shift: y = sqrt(x) = 2, 3; dy/dx = 0.5 y / x = 1/4, 1/6
  ExpectByHand(PowerText(0.5f, 1, 0), {4, 9}, {2, 3}, {0.25f, 1.0f / 6.0f});
  // power 3 with shift: y = (1 + 2x)^3 at 1, -1 is 27, -1; dy/dx = 6 (1 + 2x)^2 = 54, 6
  ExpectByHand(PowerText(3, 2, 1), {1, -1}, {27, -1}, {54, 6});
  // power 0: y = 1 whatever x, dy/dx = 0
  ExpectByHand(PowerText(0, 2, 1), {5, -3}, {1, 1}, {0, 0});
  // scale 0: y = shift^power = 2^3 = 8, dy/dx = 0
  ExpectByHand(PowerText(3, 0, 2), {5, -3}, {8, 8}, {0, 0});
}

struct PowerCase {
  float power, scale, shift;
  float lo, hi;  // input range, keeping shift + scale * x > 0 for fractional powers
};

// Names the case in failure messages.
void PrintTo(const PowerCase& c, std::ostream* os) {
  *os << "power " << c.power << " "
      << "scale " << c.scale << " "
      << "shift " << c.shift;
}

class PowerCaseTest : public ::testing::TestWithParam<PowerCase> {};

TEST_P(PowerCaseTest, GradientMatchesNumeric) {
  const PowerCase c = GetParam();
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(PowerText(c.power, c.scale, c.shift)), &ctx);
  Tensor bottom({2, 3, 2, 2}), top;
  testing::FillUniform(&bottom, c.lo, c.hi);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

TEST_P(PowerCaseTest, InPlaceMatchesSeparateTop) {
  const PowerCase c = GetParam();
  Tensor input({2, 3, 4});
  testing::FillUniform(&input, c.lo, c.hi);
  testing::ExpectInPlaceMatches(PowerText(c.power, c.scale, c.shift), input,
                                /*zero_gradient=*/c.power * c.scale == 0.0f);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PowerCaseTest,
    ::testing::Values(PowerCase{1.0f, 0.83f, -2.4f, -2.0f, 2.0f},  // linear
                      PowerCase{2.0f, 0.34f, -2.4f, -2.0f, 2.0f},  // square
                      PowerCase{0.37f, 0.83f, 0.0f, 0.5f, 2.0f},   // fractional, no shift
                      PowerCase{0.37f, 0.83f, 1.5f, 0.5f, 2.0f},   // fractional, shifted
                      PowerCase{3.0f, -0.5f, 0.2f, -2.0f, 2.0f},   // cube, negative scale
                      PowerCase{0.0f, 0.83f, 1.5f, -2.0f, 2.0f},   // constant 1
                      PowerCase{2.0f, 0.0f, 1.5f, -2.0f, 2.0f}));  // constant shift^2

}  // namespace
}  // namespace cortado
