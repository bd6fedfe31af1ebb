// SPDX-License-Identifier: Apache-2.0
// Scale on the GPU: Forward multiplies every element of a slice by s[d] (and adds b[d]), one
// thread per element, rounding each step as scale_layer.cpp does (no fused multiply-add);
// Backward sums top diff (times the input, for s) over the outer and inner dimensions for each
// scale value, with a fixed summation order so results repeat exactly (no atomics).
#include "core/cuda.hpp"
#include "layers/scale_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void ScaleForward(int64_t n, int scale_dim, int inner_dim, const float* in,
                             const float* scale, const float* bias, float* out) {
  CORTADO_KERNEL_LOOP(i, n) {
    const int64_t d = (i / inner_dim) % scale_dim;
    const float y = __fmul_rn(in[i], scale[d]);
    out[i] = bias != nullptr ? __fadd_rn(y, bias[d]) : y;
  }
}

// sum[d] (+)= the sum over o < outer and j < inner of g[k] (times x[k] when x is given), with
// k = (o * dim + d) * inner + j; one thread per d, for slices too small to share among a block.
__global__ void SliceSumsSerial(int dim, int outer, int inner, const float* g, const float* x,
                                bool accumulate, float* sum) {
  CORTADO_KERNEL_LOOP(d, dim) {
    float acc = 0.0f;
    for (int o = 0; o < outer; ++o) {
      const int64_t start = (static_cast<int64_t>(o) * dim + d) * inner;
      for (int j = 0; j < inner; ++j)
        acc += x != nullptr ? g[start + j] * x[start + j] : g[start + j];
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
__global__ void SliceSumsBlock(int dim, int outer, int inner, const float* g, const float* x,
                               bool accumulate, float* sum) {
  const int64_t per_slice = static_cast<int64_t>(outer) * inner;
  for (int d = blockIdx.x; d < dim; d += gridDim.x) {
    float acc = 0.0f;
    for (int64_t m = threadIdx.x; m < per_slice; m += blockDim.x) {
      const int64_t o = m / inner;
      const int64_t k = (o * dim + d) * inner + (m - o * inner);
      acc += x != nullptr ? g[k] * x[k] : g[k];
    }
    acc = BlockSum(acc);
    if (threadIdx.x == 0) sum[d] = accumulate ? sum[d] + acc : acc;
  }
}

void SliceSums(Context& ctx, int dim, int outer, int inner, const float* g, const float* x,
               bool accumulate, float* sum) {
  if (dim == 0) return;
  cudaStream_t stream = cuda::Stream(ctx);
  const int64_t per_slice = static_cast<int64_t>(outer) * inner;
  if (per_slice <= 256 || (inner < 32 && dim >= 8192)) {
    SliceSumsSerial<<<cuda::Blocks(dim), cuda::kThreads, 0, stream>>>(dim, outer, inner, g, x,
                                                                      accumulate, sum);
  } else {
    const int blocks = dim < 65535 ? dim : 65535;
    SliceSumsBlock<<<blocks, cuda::kThreads, 0, stream>>>(dim, outer, inner, g, x, accumulate, sum);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace

void ScaleLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int64_t n = bottom[0]->count();
  if (top[0] == bottom[0]) {
    math::gpu::Copy(*ctx_, bottom[0]->count(), bottom[0]->gpu_data(),
                    saved_input_.mutable_gpu_data());
  }
  if (n == 0) return;
  const float* scale = (bottom.size() > 1 ? bottom[1] : blobs_[0].get())->gpu_data();
  const float* bias = bias_index_ >= 0 ? blobs_[bias_index_]->gpu_data() : nullptr;
  ScaleForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, scale_dim_, inner_dim_, bottom[0]->gpu_data(), scale, bias, top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void ScaleLayer::BackwardGpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  // In place the top diff is bottom[0]'s diff: the parameter gradients read it before the
  // bottom gradient overwrites it, as on the CPU.
  const float* top_diff = top[0]->gpu_diff();
  if (bias_index_ >= 0 && param_propagate_down(bias_index_)) {
    SliceSums(*ctx_, scale_dim_, outer_dim_, inner_dim_, top_diff, nullptr, true,
              blobs_[bias_index_]->mutable_gpu_diff());
  }
  const bool learned = bottom.size() == 1;
  if (learned ? param_propagate_down(0) : propagate_down[1]) {
    // A learned scale accumulates (shared weights); bottom[1]'s diff is overwritten.
    const float* in = (top[0] == bottom[0] ? &saved_input_ : bottom[0])->gpu_data();
    Tensor* scale = learned ? blobs_[0].get() : bottom[1];
    SliceSums(*ctx_, scale_dim_, outer_dim_, inner_dim_, top_diff, in, learned,
              scale->mutable_gpu_diff());
  }
  if (propagate_down[0]) {
    const int64_t n = bottom[0]->count();
    if (n == 0) return;
    const float* scale = (learned ? blobs_[0].get() : bottom[1])->gpu_data();
    ScaleForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
        n, scale_dim_, inner_dim_, top_diff, scale, nullptr, bottom[0]->mutable_gpu_diff());
    CORTADO_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cortado
