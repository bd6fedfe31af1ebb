// SPDX-License-Identifier: Apache-2.0
// LaneSum and LaneSum2, the vectorised row sums of BatchNorm's statistics and of math::Sum:
// exact where every partial sum is exact, as close as a double sum on rows of a million values
// around a large mean (where one float accumulator drifts by far more), and LaneSum2's two sums
// equal LaneSum's bit for bit.
#include "math/lane_sum.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "math/math.hpp"

namespace cortado::math {
namespace {

TEST(LaneSumTest, SmallIntegersSumExactlyAtEverySize) {
  for (int n : {0, 1, 7, 8, 63, 64, 65, 127, 128, 1000, 100003}) {
    std::vector<float> x(static_cast<size_t>(n));
    double exact = 0.0;
    for (int i = 0; i < n; ++i) {
      x[i] = static_cast<float>((i * 37) % 19 - 9);
      exact += x[i];
    }
    EXPECT_EQ(LaneSum(n, [&](int i) { return x[i]; }), exact) << "n = " << n;
    EXPECT_EQ(Sum(n, x.data()), static_cast<float>(exact)) << "n = " << n;
  }
}

TEST(LaneSumTest, MillionValuesAroundALargeMeanAreAsCloseAsADoubleSum) {
  const int n = 1 << 20;
  std::mt19937 gen(5);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> x(n);
  long double exact = 0.0L;
  for (int i = 0; i < n; ++i) {
    x[i] = 1000.0f + noise(gen);
    exact += x[i];
  }
  const double lanes = LaneSum(n, [&](int i) { return x[i]; });
  float naive = 0.0f;  // what one float accumulator gives, for scale
  for (float v : x) naive += v;
  const double rel = std::abs(lanes - static_cast<double>(exact)) / static_cast<double>(exact);
  EXPECT_LT(rel, 1e-9);
  EXPECT_GT(std::abs(naive - static_cast<double>(exact)) / static_cast<double>(exact), 1e-5)
      << "the data should be hard for a single float accumulator";
}

TEST(LaneSumTest, TwoSumsInOnePassEqualTheSingleSums) {
  for (int n : {0, 5, 64, 200, 4099}) {
    std::vector<float> x(n), y(n);
    std::mt19937 gen(n);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (int i = 0; i < n; ++i) {
      x[i] = u(gen);
      y[i] = u(gen);
    }
    auto first = [&](int i) { return x[i]; };
    auto second = [&](int i) { return x[i] * y[i]; };
    double a = -1.0, b = -1.0;
    LaneSum2(n, first, second, &a, &b);
    EXPECT_EQ(a, LaneSum(n, first)) << "n = " << n;
    EXPECT_EQ(b, LaneSum(n, second)) << "n = " << n;
  }
}

}  // namespace
}  // namespace cortado::math
