// SPDX-License-Identifier: Apache-2.0
#include <cstdint>
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
  // Value i compares 32 random bits with p * 2^32 (P(1) = p to within 2^-32). The bits are
  // SplitMix64's output number i from a seed drawn from `rng`: counter-based, so the values are
  // computed in parallel and are the same for any number of threads, and `rng` advances by two
  // words per call. (The standard library's bernoulli_distribution draws two engine words per
  // value, sequentially, which made Dropout's mask several times slower than its arithmetic.)
  static_assert(Rng::min() == 0 && Rng::max() == 0xffffffffu, "a 32-bit engine");
  const std::uint64_t seed = (static_cast<std::uint64_t>(rng()) << 32) | rng();
  const auto threshold =
      static_cast<std::uint64_t>(static_cast<double>(p) * 4294967296.0 + 0.5);  // p * 2^32
  constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ull;
#pragma omp parallel for if (n > kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) {
    std::uint64_t z = seed + kGamma * (static_cast<std::uint64_t>(i) + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    r[i] = (z >> 32) < threshold ? 1u : 0u;
  }
}

}  // namespace cortado::math
