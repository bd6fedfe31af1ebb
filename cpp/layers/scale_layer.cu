// SPDX-License-Identifier: Apache-2.0
// Scale on the GPU. Forward multiplies every element of a slice by s[d] (and adds b[d]),
// rounding each step as scale_layer.cpp does (no fused multiply-add), float4 at a time where the
// inner size allows; in place it also saves the input in the same pass. Backward is one pass
// over top diff (and the input): each block sums its chunk of a slice d (top diff for the bias,
// top diff * input for s; float per thread, double across the block) into the context workspace
// and writes the bottom diff s[d] * dy; a small kernel then adds each d's partials in a fixed
// order. Fixed grid, fixed order, no atomics: results repeat bit for bit.
#include <cstdint>

#include "core/cuda.hpp"
#include "layers/scale_layer.hpp"
#include "math/cuda/reduce_helpers.cuh"
#include "math/gpu.hpp"

namespace cortado {
namespace {

using cuda::BlockSum2;
using cuda::FastDiv;
using cuda::Load;
using cuda::Pack;
using cuda::Store;

// Elements of one slice per block in the backward reductions (each thread then sums about 32).
constexpr int kChunk = 8192;

// out = in * s[d] (+ b[d]) over units (V floats) q, d = (q / inner_units) % scale_dim; saved
// (when given) = in. May be in place.
template <int V>
__global__ void ScaleForward(uint32_t units, FastDiv inner_units, FastDiv scale_dim,
                             const float* in, const float* scale, const float* bias, float* saved,
                             float* out) {
  CORTADO_KERNEL_LOOP(i, units) {
    const uint32_t q = static_cast<uint32_t>(i);
    const uint32_t row = inner_units.Div(q);
    const uint32_t d = row - scale_dim.Div(row) * scale_dim.divisor;
    Pack<V> x = Load<V>(in, q);
    if (saved != nullptr) Store<V>(saved, q, x);
    const float s = scale[d];
    if (bias != nullptr) {
      const float b = bias[d];
      for (int k = 0; k < V; ++k) x.v[k] = __fadd_rn(__fmul_rn(x.v[k], s), b);
    } else {
      for (int k = 0; k < V; ++k) x.v[k] = __fmul_rn(x.v[k], s);
    }
    Store<V>(out, q, x);
  }
}

// Block (d, part), over its chunk of slice d: partials = (sum of g, sum of g * x) (each only when
// wanted: kBias, x != nullptr), and dx = s[d] * g when dx is given (may be dx == g: every element
// is read before the same thread writes it).
template <int V, bool kSums>
__global__ void ScaleBackwardPass(cuda::ChannelLayout layout, const float* g, const float* x,
                                  const float* scale, float* dx, double2* partials) {
  const int d = blockIdx.x / layout.parts;
  const int part = blockIdx.x - d * layout.parts;
  const uint32_t begin = static_cast<uint32_t>(part) * layout.chunk_units;
  const uint32_t end = min(begin + layout.chunk_units, layout.units);
  const float s = dx != nullptr ? scale[d] : 0.0f;
  float s1[V], s2[V];
  for (int k = 0; k < V; ++k) s1[k] = s2[k] = 0.0f;
  for (uint32_t q = begin + threadIdx.x; q < end; q += blockDim.x) {
    const int64_t at = layout.At(q, d);
    Pack<V> v = Load<V>(g, at);
    if constexpr (kSums) {
      if (x != nullptr) {
        const Pack<V> in = Load<V>(x, at);
        for (int k = 0; k < V; ++k) s2[k] += v.v[k] * in.v[k];
      }
      for (int k = 0; k < V; ++k) s1[k] += v.v[k];
    }
    if (dx != nullptr) {
      for (int k = 0; k < V; ++k) v.v[k] = __fmul_rn(v.v[k], s);
      Store<V>(dx, at, v);
    }
  }
  if constexpr (kSums) {
    double t1 = 0.0, t2 = 0.0;
    for (int k = 0; k < V; ++k) {
      t1 += s1[k];
      t2 += s2[k];
    }
    const double2 total = BlockSum2(t1, t2);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
  }
}

// One warp per d: the sums of d's partials in a fixed order; bias_diff[d] += the first,
// scale_diff[d] (+)= the second (each when given).
__global__ void CombineSlices(int dim, int parts, const double2* partials, float* bias_diff,
                              float* scale_diff, bool accumulate_scale) {
  const int d = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (d >= dim) return;
  double a = 0.0, b = 0.0;
  for (int i = lane; i < parts; i += 32) {
    a += partials[static_cast<int64_t>(d) * parts + i].x;
    b += partials[static_cast<int64_t>(d) * parts + i].y;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, offset);
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  if (lane == 0) {
    if (bias_diff != nullptr) bias_diff[d] += static_cast<float>(a);
    if (scale_diff != nullptr) {
      scale_diff[d] =
          accumulate_scale ? scale_diff[d] + static_cast<float>(b) : static_cast<float>(b);
    }
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

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int V>
void LaunchForward(Context& ctx, int64_t count, int scale_dim, int inner_dim, const float* in,
                   const float* scale, const float* bias, float* saved, float* out) {
  const int64_t units = count / V;
  ScaleForward<V><<<cuda::Blocks(units), cuda::kThreads, 0, cuda::Stream(ctx)>>>(
      static_cast<uint32_t>(units), FastDiv(inner_dim / V), FastDiv(scale_dim), in, scale, bias,
      saved, out);
  CORTADO_CUDA_CHECK_LAUNCH();
}

// The backward pass over a [outer, dim, inner] top diff g: bias_diff += per-d sums of g,
// scale_diff (+)= per-d sums of g * x, dx = s[d] * g (each when its pointer is given).
template <int V>
void LaunchBackward(Context& ctx, int outer, int dim, int inner, const float* g, const float* x,
                    const float* scale, float* dx, float* bias_diff, float* scale_diff,
                    bool accumulate_scale) {
  const cuda::ChannelLayout layout = cuda::MakeChannelLayout(outer, dim, inner, V, kChunk);
  const int blocks = dim * layout.parts;
  const cudaStream_t stream = cuda::Stream(ctx);
  const bool sums = bias_diff != nullptr || scale_diff != nullptr;
  if (sums) {
    auto* partials = static_cast<double2*>(
        cuda::Get(ctx).Workspace(static_cast<size_t>(blocks) * sizeof(double2)));
    ScaleBackwardPass<V, true><<<blocks, cuda::kThreads, 0, stream>>>(
        layout, g, scale_diff != nullptr ? x : nullptr, scale, dx, partials);
    CORTADO_CUDA_CHECK_LAUNCH();
    const int warps = cuda::kThreads / 32;
    CombineSlices<<<(dim + warps - 1) / warps, cuda::kThreads, 0, stream>>>(
        dim, layout.parts, partials, bias_diff, scale_diff, accumulate_scale);
    CORTADO_CUDA_CHECK_LAUNCH();
  } else {
    ScaleBackwardPass<V, false>
        <<<blocks, cuda::kThreads, 0, stream>>>(layout, g, nullptr, scale, dx, nullptr);
    CORTADO_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void ScaleLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int64_t n = bottom[0]->count();
  if (n == 0) return;
  const float* in = bottom[0]->gpu_data();
  float* saved = top[0] == bottom[0] ? saved_input_.mutable_gpu_data() : nullptr;
  float* out = top[0]->mutable_gpu_data();
  const float* scale = (bottom.size() > 1 ? bottom[1] : blobs_[0].get())->gpu_data();
  const float* bias = bias_index_ >= 0 ? blobs_[bias_index_]->gpu_data() : nullptr;
  const bool vector = inner_dim_ % 4 == 0 && Aligned16(in) && Aligned16(out) &&
                      (saved == nullptr || Aligned16(saved));
  (vector ? LaunchForward<4> : LaunchForward<1>)(*ctx_, n, scale_dim_, inner_dim_, in, scale, bias,
                                                 saved, out);
}

void ScaleLayer::BackwardGpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  // In place the top diff is bottom[0]'s diff: every element is read for the parameter
  // gradients before the bottom gradient overwrites it, as on the CPU.
  const int64_t n = bottom[0]->count();
  const float* top_diff = top[0]->gpu_diff();
  const bool learned = bottom.size() == 1;
  float* bias_diff = bias_index_ >= 0 && param_propagate_down(bias_index_)
                         ? blobs_[bias_index_]->mutable_gpu_diff()
                         : nullptr;
  const float* in = nullptr;
  float* scale_diff = nullptr;
  if (learned ? param_propagate_down(0) : propagate_down[1]) {
    // A learned scale accumulates (shared weights); bottom[1]'s diff is overwritten.
    in = (top[0] == bottom[0] ? &saved_input_ : bottom[0])->gpu_data();
    scale_diff = (learned ? blobs_[0].get() : bottom[1])->mutable_gpu_diff();
  }
  const float* scale = (learned ? blobs_[0].get() : bottom[1])->gpu_data();
  float* dx = propagate_down[0] && n > 0 ? bottom[0]->mutable_gpu_diff() : nullptr;
  if (scale_dim_ == 0 || (bias_diff == nullptr && scale_diff == nullptr && dx == nullptr)) return;
  if (inner_dim_ < 32 && scale_dim_ >= 8192) {
    // Many narrow slices: one thread per d reads contiguous memory across a warp.
    const cudaStream_t stream = cuda::Stream(*ctx_);
    if (bias_diff != nullptr) {
      SliceSumsSerial<<<cuda::Blocks(scale_dim_), cuda::kThreads, 0, stream>>>(
          scale_dim_, outer_dim_, inner_dim_, top_diff, nullptr, true, bias_diff);
      CORTADO_CUDA_CHECK_LAUNCH();
    }
    if (scale_diff != nullptr) {
      SliceSumsSerial<<<cuda::Blocks(scale_dim_), cuda::kThreads, 0, stream>>>(
          scale_dim_, outer_dim_, inner_dim_, top_diff, in, learned, scale_diff);
      CORTADO_CUDA_CHECK_LAUNCH();
    }
    if (dx != nullptr) {
      LaunchForward<1>(*ctx_, n, scale_dim_, inner_dim_, top_diff, scale, nullptr, nullptr, dx);
    }
    return;
  }
  const bool vector = inner_dim_ % 4 == 0 && Aligned16(top_diff) &&
                      (in == nullptr || Aligned16(in)) && (dx == nullptr || Aligned16(dx));
  (vector ? LaunchBackward<4> : LaunchBackward<1>)(*ctx_, outer_dim_, scale_dim_, inner_dim_,
                                                   top_diff, in, scale, dx, bias_diff, scale_diff,
                                                   learned);
}

}  // namespace cortado
