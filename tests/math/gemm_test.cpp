// SPDX-License-Identifier: Apache-2.0
// math::Gemm, the CPU matrix product of inner products and im2col convolutions (oneDNN's sgemm
// where oneDNN is built in, OpenBLAS's otherwise): every transpose, alpha and beta, empty and
// one-wide operands, against a product in double; beta = 0 never reads C.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "math/math.hpp"

namespace cortado::math {
namespace {

// C = alpha op(A) op(B) + beta C in double, row-major, C not read when beta is 0.
std::vector<double> Reference(bool ta, bool tb, int m, int n, int k, float alpha,
                              const std::vector<float>& a, const std::vector<float>& b, float beta,
                              const std::vector<float>& c) {
  std::vector<double> out(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) {
        const double x = ta ? a[static_cast<size_t>(p) * m + i] : a[static_cast<size_t>(i) * k + p];
        const double y = tb ? b[static_cast<size_t>(j) * k + p] : b[static_cast<size_t>(p) * n + j];
        sum += x * y;
      }
      const size_t at = static_cast<size_t>(i) * n + j;
      out[at] = alpha * sum + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * c[at]);
    }
  }
  return out;
}

TEST(GemmTest, EveryTransposeAlphaAndBetaAgainstADoubleProduct) {
  std::mt19937 random(3);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const int dims[][3] = {{1, 1, 1},     {1, 7, 5},     {7, 1, 5}, {5, 7, 1}, {8, 1000, 64},
                         {64, 10, 500}, {33, 17, 129}, {3, 0, 4}, {0, 3, 4}, {4, 3, 0}};
  for (const auto& d : dims) {
    const int m = d[0];
    const int n = d[1];
    const int k = d[2];
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0;
      const bool tb = (t & 2) != 0;
      for (const float beta : {0.0f, 1.0f, 0.5f}) {
        const float alpha = beta == 0.5f ? -2.0f : 1.0f;
        SCOPED_TRACE(std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) +
                     (ta ? " A^T" : "") + (tb ? " B^T" : "") + " alpha " + std::to_string(alpha) +
                     " beta " + std::to_string(beta));
        std::vector<float> a(static_cast<size_t>(m) * k);
        std::vector<float> b(static_cast<size_t>(k) * n);
        std::vector<float> c(static_cast<size_t>(m) * n);
        for (float& x : a) x = value(random);
        for (float& x : b) x = value(random);
        for (float& x : c) x = value(random);
        // With beta 0, C's old values are never read: garbage (NaN) must not come through.
        if (beta == 0.0f) c.assign(c.size(), std::numeric_limits<float>::quiet_NaN());
        const std::vector<double> expected = Reference(ta, tb, m, n, k, alpha, a, b, beta, c);
        Gemm(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, c.data());
        for (size_t i = 0; i < c.size(); ++i) {
          ASSERT_NEAR(c[i], expected[i], 1e-5 * (1 + k)) << "element " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace cortado::math
