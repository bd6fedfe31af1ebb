// SPDX-License-Identifier: Apache-2.0
#include <random>

#include "core/error.hpp"
#include "math/math.hpp"

namespace cortado::math {

void RngUniform(int n, float lo, float hi, Rng& rng, float* r) {
  CORTADO_CHECK_LE(lo, hi);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int i = 0; i < n; ++i) r[i] = dist(rng);
}

void RngGaussian(int n, float mean, float stddev, Rng& rng, float* r) {
  CORTADO_CHECK_GT(stddev, 0.0f);
  std::normal_distribution<float> dist(mean, stddev);
  for (int i = 0; i < n; ++i) r[i] = dist(rng);
}

void RngBernoulli(int n, float p, Rng& rng, unsigned int* r) {
  CORTADO_CHECK(p >= 0.0f && p <= 1.0f, "bernoulli probability {}", p);
  std::bernoulli_distribution dist(p);
  for (int i = 0; i < n; ++i) r[i] = dist(rng) ? 1u : 0u;
}

}  // namespace cortado::math
