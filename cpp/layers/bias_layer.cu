// SPDX-License-Identifier: Apache-2.0
// Bias on the GPU: Forward adds b[d] to every element of its slice (one thread per element);
// Backward sums the top diff over the outer and inner dimensions for each bias value, with a
// fixed summation order so results repeat exactly (no atomics).
#include "core/cuda.hpp"
#include "layers/bias_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void BiasForward(int64_t n, int bias_dim, int inner_dim, const float* in,
                            const float* bias, float* out) {
  CORTADO_KERNEL_LOOP(i, n) out[i] = in[i] + bias[(i / inner_dim) % bias_dim];
}

// sum[d] (+)= the sum over o < outer and j < inner of g[(o * dim + d) * inner + j]; one thread
// per d, for slices too small to share among a block.
__global__ void SliceSumsSerial(int dim, int outer, int inner, const float* g, bool accumulate,
                                float* sum) {
  CORTADO_KERNEL_LOOP(d, dim) {
    float acc = 0.0f;
    for (int o = 0; o < outer; ++o) {
      const float* row = g + (static_cast<int64_t>(o) * dim + d) * inner;
      for (int j = 0; j < inner; ++j) acc += row[j];
    }
    sum[d] = accumulate ? sum[d] + acc : acc;
  }
}

__device__ float BlockSum(float value) {
  __shared__ float warp_sums[cuda::kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // warp_sums may still be read by the previous call
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = threadIdx.x < cuda::kThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2)
      value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

// The same sums with one block per d (launched with cuda::kThreads threads).
__global__ void SliceSumsBlock(int dim, int outer, int inner, const float* g, bool accumulate,
                               float* sum) {
  const int64_t per_slice = static_cast<int64_t>(outer) * inner;
  for (int d = blockIdx.x; d < dim; d += gridDim.x) {
    float acc = 0.0f;
    for (int64_t m = threadIdx.x; m < per_slice; m += blockDim.x) {
      const int64_t o = m / inner;
      acc += g[(o * dim + d) * inner + (m - o * inner)];
    }
    acc = BlockSum(acc);
    if (threadIdx.x == 0) sum[d] = accumulate ? sum[d] + acc : acc;
  }
}

void SliceSums(Context& ctx, int dim, int outer, int inner, const float* g, bool accumulate,
               float* sum) {
  if (dim == 0) return;
  cudaStream_t stream = cuda::Stream(ctx);
  const int64_t per_slice = static_cast<int64_t>(outer) * inner;
  if (per_slice <= 256 || (inner < 32 && dim >= 8192)) {
    SliceSumsSerial<<<cuda::Blocks(dim), cuda::kThreads, 0, stream>>>(dim, outer, inner, g,
                                                                      accumulate, sum);
  } else {
    const int blocks = dim < 65535 ? dim : 65535;
    SliceSumsBlock<<<blocks, cuda::kThreads, 0, stream>>>(dim, outer, inner, g, accumulate, sum);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace

void BiasLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int64_t n = bottom[0]->count();
  if (n == 0) return;
  const float* bias = (bottom.size() > 1 ? bottom[1] : blobs_[0].get())->gpu_data();
  BiasForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bias_dim_, inner_dim_, bottom[0]->gpu_data(), bias, top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void BiasLayer::BackwardGpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  const float* top_diff = top[0]->gpu_diff();
  if (propagate_down[0] && bottom[0] != top[0]) {
    math::gpu::Copy(*ctx_, bottom[0]->count(), top_diff, bottom[0]->mutable_gpu_diff());
  }
  const bool learned = bottom.size() == 1;
  if (learned ? !param_propagate_down(0) : !propagate_down[1]) return;
  // A learned bias accumulates its gradient (shared weights); bottom[1]'s diff is overwritten.
  Tensor* bias = learned ? blobs_[0].get() : bottom[1];
  SliceSums(*ctx_, bias_dim_, outer_dim_, inner_dim_, top_diff, learned, bias->mutable_gpu_diff());
}

}  // namespace cortado
