// SPDX-License-Identifier: Apache-2.0
// Softmax on the GPU: the same results as softmax_layer.cpp. Each position (outer x inner index)
// is one distribution over the channels, handled by one thread when there are many positions
// next to each other in memory (inner >= 32, reads coalesce across threads) and by one warp
// otherwise (the usual N x C case), whose lanes split the channels and combine by shuffles.
// Every thread or warp reads its position's inputs before it writes them, so in place works.
#include <cmath>

#include "core/cuda.hpp"
#include "layers/softmax_layer.hpp"

namespace cortado {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

__device__ __forceinline__ int64_t PositionBase(int64_t p, int channels, int inner) {
  return (p / inner) * channels * inner + p % inner;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// A butterfly sum: every lane ends with the same value (a + b == b + a exactly).
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__global__ void SoftmaxForwardThread(int64_t positions, int channels, int inner, const float* x,
                                     float* y) {
  CORTADO_KERNEL_LOOP(p, positions) {
    const int64_t base = PositionBase(p, channels, inner);
    float max = x[base];
    for (int c = 1; c < channels; ++c) max = fmaxf(max, x[base + int64_t{c} * inner]);
    float sum = 0.0f;
    for (int c = 0; c < channels; ++c) sum += expf(x[base + int64_t{c} * inner] - max);
    for (int c = 0; c < channels; ++c) {
      const int64_t i = base + int64_t{c} * inner;
      y[i] = expf(x[i] - max) / sum;
    }
  }
}

__global__ void SoftmaxForwardWarp(int64_t positions, int channels, int inner, const float* x,
                                   float* y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x / kWarp;
  for (int64_t p = first; p < positions; p += stride) {  // uniform across the warp
    const int64_t base = PositionBase(p, channels, inner);
    float max = -INFINITY;
    for (int c = lane; c < channels; c += kWarp) max = fmaxf(max, x[base + int64_t{c} * inner]);
    max = WarpMax(max);
    float sum = 0.0f;
    for (int c = lane; c < channels; c += kWarp) sum += expf(x[base + int64_t{c} * inner] - max);
    sum = WarpSum(sum);
    for (int c = lane; c < channels; c += kWarp) {
      const int64_t i = base + int64_t{c} * inner;
      y[i] = expf(x[i] - max) / sum;
    }
  }
}

// dx = y * (dy - sum_c(dy * y)) per position.
__global__ void SoftmaxBackwardThread(int64_t positions, int channels, int inner, const float* y,
                                      const float* dy, float* dx) {
  CORTADO_KERNEL_LOOP(p, positions) {
    const int64_t base = PositionBase(p, channels, inner);
    float dot = 0.0f;
    for (int c = 0; c < channels; ++c) {
      const int64_t i = base + int64_t{c} * inner;
      dot += dy[i] * y[i];
    }
    for (int c = 0; c < channels; ++c) {
      const int64_t i = base + int64_t{c} * inner;
      dx[i] = y[i] * (dy[i] - dot);
    }
  }
}

__global__ void SoftmaxBackwardWarp(int64_t positions, int channels, int inner, const float* y,
                                    const float* dy, float* dx) {
  const int lane = threadIdx.x % kWarp;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x / kWarp;
  for (int64_t p = first; p < positions; p += stride) {
    const int64_t base = PositionBase(p, channels, inner);
    float dot = 0.0f;
    for (int c = lane; c < channels; c += kWarp) {
      const int64_t i = base + int64_t{c} * inner;
      dot += dy[i] * y[i];
    }
    dot = WarpSum(dot);  // every lane has read its dy before any lane writes dx
    for (int c = lane; c < channels; c += kWarp) {
      const int64_t i = base + int64_t{c} * inner;
      dx[i] = y[i] * (dy[i] - dot);
    }
  }
}

bool UseWarps(int inner) { return inner < kWarp; }

}  // namespace

void SoftmaxLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (bottom[0]->count() == 0) return;
  const int64_t positions = static_cast<int64_t>(outer_num_) * inner_num_;
  const float* x = bottom[0]->gpu_data();
  float* y = top[0]->mutable_gpu_data();
  cudaStream_t stream = cuda::Stream(*ctx_);
  if (UseWarps(inner_num_)) {
    SoftmaxForwardWarp<<<cuda::Blocks(positions * kWarp), cuda::kThreads, 0, stream>>>(
        positions, channels_, inner_num_, x, y);
  } else {
    SoftmaxForwardThread<<<cuda::Blocks(positions), cuda::kThreads, 0, stream>>>(
        positions, channels_, inner_num_, x, y);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void SoftmaxLayer::BackwardGpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0] || bottom[0]->count() == 0) return;
  const int64_t positions = static_cast<int64_t>(outer_num_) * inner_num_;
  const float* y = top[0]->gpu_data();
  const float* dy = top[0]->gpu_diff();
  float* dx = bottom[0]->mutable_gpu_diff();
  cudaStream_t stream = cuda::Stream(*ctx_);
  if (UseWarps(inner_num_)) {
    SoftmaxBackwardWarp<<<cuda::Blocks(positions * kWarp), cuda::kThreads, 0, stream>>>(
        positions, channels_, inner_num_, y, dy, dx);
  } else {
    SoftmaxBackwardThread<<<cuda::Blocks(positions), cuda::kThreads, 0, stream>>>(
        positions, channels_, inner_num_, y, dy, dx);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
