// SPDX-License-Identifier: Apache-2.0
// GPU random numbers (math/gpu.hpp): cuRAND's Philox4x32-10 generator, one per context on its
// stream, where the build has cuRAND; otherwise our own kernels below. Those implement
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), a
// counter-based generator: element i of a draw uses the counter (offset + i) under the
// context's key, so results depend only on the seed and on how many numbers were drawn before,
// never on the launch shape.
#include "core/cuda.hpp"
#include "math/gpu.hpp"

namespace cortado::math::gpu {

#if CORTADO_WITH_CURAND
namespace {

// cuRAND's uniform numbers lie in (0, 1]; 1 - u lies in [0, 1), kept below 1 after rounding.
__global__ void ToRange(int n, float lo, float hi, float* r) {
  CORTADO_KERNEL_LOOP(i, n) r[i] = lo + (hi - lo) * fminf(1.0f - r[i], 0x1.fffffep-1f);
}

// Uniform (0, 1] floats, stored in r's words, become 1 with probability p, else 0.
__global__ void ToBernoulli(int n, float p, unsigned int* r) {
  CORTADO_KERNEL_LOOP(i, n) r[i] = __uint_as_float(r[i]) <= p ? 1u : 0u;
}

curandGenerator_t Generator(Context& ctx) { return ::cortado::cuda::Get(ctx).curand; }

}  // namespace

void RngUniform(Context& ctx, int n, float lo, float hi, float* r) {
  if (n <= 0) return;
  CORTADO_CURAND_CHECK(curandGenerateUniform(Generator(ctx), r, static_cast<size_t>(n)));
  ToRange<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0,
            ::cortado::cuda::Stream(ctx)>>>(n, lo, hi, r);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void RngGaussian(Context& ctx, int n, float mean, float stddev, float* r) {
  if (n <= 0) return;
  // cuRAND draws normal numbers in pairs: an odd count takes its last one from a pair drawn
  // into the context's small scratch buffer.
  const int even = n - n % 2;
  if (even > 0) {
    CORTADO_CURAND_CHECK(
        curandGenerateNormal(Generator(ctx), r, static_cast<size_t>(even), mean, stddev));
  }
  if (even < n) {
    float* pair = ::cortado::cuda::Get(ctx).ReduceBuffer();
    CORTADO_CURAND_CHECK(curandGenerateNormal(Generator(ctx), pair, 2, mean, stddev));
    CORTADO_CUDA_CHECK(cudaMemcpyAsync(r + even, pair, sizeof(float), cudaMemcpyDeviceToDevice,
                                       ::cortado::cuda::Stream(ctx)));
  }
}

void RngBernoulli(Context& ctx, int n, float p, unsigned int* r) {
  if (n <= 0) return;
  CORTADO_CURAND_CHECK(
      curandGenerateUniform(Generator(ctx), reinterpret_cast<float*>(r), static_cast<size_t>(n)));
  ToBernoulli<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0,
                ::cortado::cuda::Stream(ctx)>>>(n, p, r);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void RngBits(Context& ctx, int n, unsigned int* r) {
  if (n <= 0) return;
  CORTADO_CURAND_CHECK(curandGenerate(Generator(ctx), r, static_cast<size_t>(n)));
}

#else
namespace {

struct Words {
  uint32_t w[4];
};

__device__ __forceinline__ Words Philox(uint64_t counter, uint64_t seed) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
    const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// [0, 1) from the top 24 bits.
__device__ __forceinline__ float Unit(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

__global__ void UniformKernel(int n, uint64_t seed, uint64_t offset, float lo, float hi, float* r) {
  CORTADO_KERNEL_LOOP(i, n) r[i] = lo + (hi - lo) * Unit(Philox(offset + i, seed).w[0]);
}

__global__ void GaussianKernel(int n, uint64_t seed, uint64_t offset, float mean, float stddev,
                               float* r) {
  CORTADO_KERNEL_LOOP(i, n) {
    const Words words = Philox(offset + i, seed);
    const float u1 = Unit(words.w[0]) + (1.0f / 16777216.0f);  // (0, 1]: log is finite
    const float u2 = Unit(words.w[1]);
    r[i] = mean + stddev * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}

__global__ void BernoulliKernel(int n, uint64_t seed, uint64_t offset, float p, unsigned int* r) {
  CORTADO_KERNEL_LOOP(i, n) r[i] = Unit(Philox(offset + i, seed).w[0]) < p ? 1u : 0u;
}

__global__ void BitsKernel(int n, uint64_t seed, uint64_t offset, unsigned int* r) {
  CORTADO_KERNEL_LOOP(i, n) r[i] = Philox(offset + i, seed).w[0];
}

// The key and first counter of a draw of n numbers, advancing the context's counter.
struct Draw {
  cudaStream_t stream;
  uint64_t seed;
  uint64_t offset;
};

Draw Take(Context& ctx, int n) {
  auto& res = ::cortado::cuda::Get(ctx);
  Draw draw{res.stream, res.philox_seed, res.philox_offset};
  res.philox_offset += static_cast<uint64_t>(n);
  return draw;
}

}  // namespace

void RngUniform(Context& ctx, int n, float lo, float hi, float* r) {
  if (n <= 0) return;
  const Draw d = Take(ctx, n);
  UniformKernel<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0, d.stream>>>(
      n, d.seed, d.offset, lo, hi, r);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void RngGaussian(Context& ctx, int n, float mean, float stddev, float* r) {
  if (n <= 0) return;
  const Draw d = Take(ctx, n);
  GaussianKernel<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0, d.stream>>>(
      n, d.seed, d.offset, mean, stddev, r);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void RngBernoulli(Context& ctx, int n, float p, unsigned int* r) {
  if (n <= 0) return;
  const Draw d = Take(ctx, n);
  BernoulliKernel<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0, d.stream>>>(
      n, d.seed, d.offset, p, r);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void RngBits(Context& ctx, int n, unsigned int* r) {
  if (n <= 0) return;
  const Draw d = Take(ctx, n);
  BitsKernel<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0, d.stream>>>(n, d.seed,
                                                                                     d.offset, r);
  CORTADO_CUDA_CHECK_LAUNCH();
}

#endif  // CORTADO_WITH_CURAND

}  // namespace cortado::math::gpu
