// SPDX-License-Identifier: Apache-2.0
// ArgMax on the GPU: one warp per search. Round k finds the largest (value, index) pair below
// the pair chosen in round k - 1, so the rounds give the top_k pairs in descending order with
// ties to the larger index: the order of argmax_layer.cpp's partial_sort.
#include "core/cuda.hpp"
#include "layers/argmax_layer.hpp"

namespace cortado {
namespace {

// (value, index) pairs, compared by value, then by index; index -1 is "no pair".
__device__ __forceinline__ bool Greater(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai > bi);
}

constexpr int kWarpsPerBlock = cuda::kThreads / 32;

// Search s compares in[(outer * dim + j) * stride + inner] for j < dim, with
// outer = s / stride and inner = s % stride. With `by_axis` the k-th result goes to
// out[(outer * top_k + k) * stride + inner] (the value when out_max_val, else the index);
// otherwise to out[s * top_k + k] (indices), followed by the values at out[...] + top_k when
// out_max_val (then the row is 2 * top_k long).
__global__ void ArgMaxKernel(int searches, int dim, int stride, int top_k, bool by_axis,
                             bool out_max_val, const float* in, float* out) {
  const int lane = threadIdx.x % 32;
  const int64_t first_warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t num_warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t s = first_warp; s < searches; s += num_warps) {
    const int64_t outer = s / stride, inner = s - outer * stride;
    const float* x = in + outer * dim * stride + inner;
    float prev_v = 0.0f;
    int prev_i = -1;
    for (int k = 0; k < top_k; ++k) {
      float best_v = 0.0f;
      int best_i = -1;
      for (int j = lane; j < dim; j += 32) {
        const float v = x[static_cast<int64_t>(j) * stride];
        if ((prev_i < 0 || Greater(prev_v, prev_i, v, j)) &&
            (best_i < 0 || Greater(v, j, best_v, best_i))) {
          best_v = v;
          best_i = j;
        }
      }
      for (int offset = 16; offset > 0; offset /= 2) {
        const float other_v = __shfl_xor_sync(0xffffffffu, best_v, offset);
        const int other_i = __shfl_xor_sync(0xffffffffu, best_i, offset);
        if (other_i >= 0 && (best_i < 0 || Greater(other_v, other_i, best_v, best_i))) {
          best_v = other_v;
          best_i = other_i;
        }
      }
      if (lane == 0) {
        const float index = static_cast<float>(best_i);
        if (by_axis) {
          out[(outer * top_k + k) * stride + inner] = out_max_val ? best_v : index;
        } else if (out_max_val) {
          out[2 * s * top_k + k] = index;
          out[2 * s * top_k + top_k + k] = best_v;
        } else {
          out[s * top_k + k] = index;
        }
      }
      prev_v = best_v;
      prev_i = best_i;
    }
  }
}

}  // namespace

void ArgMaxLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  int dim = 0;
  int stride = 1;
  if (has_axis_) {
    dim = bottom[0]->shape(axis_);
    stride = bottom[0]->count(axis_ + 1);
  } else {
    dim = bottom[0]->count(1);
  }
  if (dim == 0) return;
  const int searches = bottom[0]->count() / dim;
  if (searches == 0) return;
  const int64_t warps = searches;
  const int64_t blocks_needed = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int blocks = static_cast<int>(blocks_needed < 65535 * 8 ? blocks_needed : 65535 * 8);
  ArgMaxKernel<<<blocks, cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      searches, dim, stride, top_k_, has_axis_, out_max_val_, bottom[0]->gpu_data(),
      top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void ArgMaxLayer::BackwardGpu(const std::vector<Tensor*>& top,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& bottom) {
  BackwardCpu(top, propagate_down, bottom);  // throws when asked for a gradient
}

}  // namespace cortado
