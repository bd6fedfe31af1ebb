// SPDX-License-Identifier: Apache-2.0
// The CPU Bernoulli generator behind Dropout's mask: the fraction of ones is p within a few
// standard errors, p = 0 and p = 1 are exact, the values repeat with the seed whatever the
// number of threads, and neighbouring values are not correlated.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/context.hpp"
#include "math/math.hpp"

namespace cortado::math {
namespace {

std::vector<unsigned int> Draw(int n, float p, unsigned int seed) {
  Rng rng(seed);
  std::vector<unsigned int> r(static_cast<size_t>(n), 7u);
  RngBernoulli(n, p, rng, r.data());
  return r;
}

double Fraction(const std::vector<unsigned int>& r) {
  double ones = 0;
  for (unsigned int v : r) ones += v;
  return ones / static_cast<double>(r.size());
}

TEST(RngBernoulliTest, FractionOfOnesIsP) {
  const int n = 1 << 20;
  for (float p : {0.5f, 0.8f, 0.1f, 0.999f}) {
    const std::vector<unsigned int> r = Draw(n, p, 1701);
    for (unsigned int v : r) ASSERT_TRUE(v == 0u || v == 1u);
    // Five standard errors of a binomial fraction.
    const double tolerance = 5.0 * std::sqrt(p * (1.0 - p) / n);
    EXPECT_NEAR(Fraction(r), p, tolerance) << "p = " << p;
  }
}

TEST(RngBernoulliTest, ZeroAndOneAreExact) {
  EXPECT_EQ(Fraction(Draw(100000, 0.0f, 3)), 0.0);
  EXPECT_EQ(Fraction(Draw(100000, 1.0f, 3)), 1.0);
}

TEST(RngBernoulliTest, RepeatsWithTheSeedForAnyThreadCountAndAdvancesTheEngine) {
  const int n = 200000;  // above the size that runs in parallel
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<unsigned int> one = Draw(n, 0.5f, 42);
  omp_set_num_threads(threads > 1 ? threads : 2);
  const std::vector<unsigned int> many = Draw(n, 0.5f, 42);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, many);
  EXPECT_NE(Draw(n, 0.5f, 43), one);

  // Two calls on one engine give two different masks.
  Rng rng(42);
  std::vector<unsigned int> first(static_cast<size_t>(n)), second(static_cast<size_t>(n));
  RngBernoulli(n, 0.5f, rng, first.data());
  RngBernoulli(n, 0.5f, rng, second.data());
  EXPECT_NE(first, second);
}

TEST(RngBernoulliTest, NeighboursAreIndependent) {
  // P(r[i] = 1 and r[i + 1] = 1) = p^2 for independent values.
  const int n = 1 << 20;
  const float p = 0.5f;
  const std::vector<unsigned int> r = Draw(n, p, 9);
  double both = 0;
  for (int i = 0; i + 1 < n; ++i) both += r[i] & r[i + 1];
  const double q = p * p;
  EXPECT_NEAR(both / (n - 1), q, 5.0 * std::sqrt(q * (1.0 - q) / (n - 1)));
}

TEST(RngBernoulliTest, ProbabilityOutsideZeroToOneIsRefused) {
  Rng rng(1);
  unsigned int r[4];
  EXPECT_ANY_THROW(RngBernoulli(4, 1.5f, rng, r));
  EXPECT_ANY_THROW(RngBernoulli(4, -0.1f, rng, r));
}

}  // namespace
}  // namespace cortado::math
