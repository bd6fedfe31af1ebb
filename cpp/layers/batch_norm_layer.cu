// SPDX-License-Identifier: Apache-2.0
// BatchNorm on the GPU, as batch_norm_layer.cpp computes it. The per-channel sums are a
// two-level reduction: each channel's N * spatial values are cut into fixed chunks, one block per
// chunk writes its partial sums (float per thread, double across the block) to the context
// workspace, and the element-wise pass that follows first adds the channel's partials in a fixed
// order (every block of a channel gets the same bits) before it normalises. Fixed grid, fixed
// order, no atomics: results repeat bit for bit. The mean and variance come from one read: sums
// of x - k and (x - k)^2 with k the channel's first value, which keeps the single-pass variance
// free of cancellation. Loads and stores are of 4 values where the spatial size allows. No host
// reads.
// Fused with a Scale (and ReLU), the normalising pass also writes relu(x_norm * s + b) (rounded
// step by step, as scale_layer.cu and relu_layer.cu do), and the backward passes take the ReLU's
// mask and the Scale's factor into g and add the Scale's diffs from the same partial sums.
// In a 16-bit type (Layer::HalfTensors) the same kernels read and write x, the top, dy, dx and the
// kept x_norm in that type, computing in float32 and rounding each stored value once; the
// statistics, the running sums and the Scale's parameters and diffs stay float32.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>

#include "core/cuda.hpp"
#include "layers/batch_norm_layer.hpp"
#include "layers/eltwise_layer.hpp"
#include "layers/half_values.cuh"
#include "math/cuda/reduce_helpers.cuh"

namespace cortado {
namespace {

using cuda::BlockSum2;
using cuda::ChannelLayout;
using cuda::FastDiv;
using cuda::Load;
using cuda::Pack;
using cuda::Store;
using half_values::Narrow;
using half_values::PackAligned;
using half_values::Widen;

// Values of one channel per block in the reductions (each thread then sums about 32).
constexpr int kChunk = 8192;

// The sum of parts[0, count) in a fixed order (lane-strided, then a fixed shuffle tree), given
// to every thread of the block.
__device__ double2 CombineParts(const double2* parts, int count) {
  __shared__ double2 total;
  if (threadIdx.x < 32) {
    double a = 0.0, b = 0.0;
    for (int i = threadIdx.x; i < count; i += 32) {
      a += parts[i].x;
      b += parts[i].y;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      a += __shfl_down_sync(0xffffffffu, a, offset);
      b += __shfl_down_sync(0xffffffffu, b, offset);
    }
    if (threadIdx.x == 0) total = make_double2(a, b);
  }
  __syncthreads();
  return total;
}

// The fused Scale's output for a normalised value: v * s (+ b), each step rounded (as
// scale_layer.cu rounds it). Normalize, AffineFromNormalised and the ReLU's mask all compute it
// here, so a recomputed top and the mask agree with Forward bit for bit.
__device__ __forceinline__ float ScaleShift(float v, float s, float b, bool has_bias) {
  const float t = __fmul_rn(v, s);
  return has_bias ? __fadd_rn(t, b) : t;
}
// The ReLU of slope `slope` (as relu_layer.cu computes it).
__device__ __forceinline__ float Relu(float t, float slope) {
  return fmaxf(t, 0.0f) + slope * fminf(t, 0.0f);
}

// A sum folded into the chain (BatchNormLayer::FoldSum): its other bottom `a` (null: none), and its
// fused ReLU.
template <typename T>
struct FoldedSum {
  const T* a = nullptr;
  bool relu = false;
  float slope = 0.0f;
};
// The folded sum's output for the chain's value t and the other bottom's value r: t rounded to T
// first (as the chain's output would be stored), then added and ReLU'd as eltwise_layer.cu does
// (coefficients 1).
template <typename T>
__device__ __forceinline__ float AddToSum(const FoldedSum<T>& sum, float t, float r) {
  if constexpr (!std::is_same_v<T, float>) t = Widen(Narrow<T>(t));
  const float v = r + t;
  return sum.relu ? (v > 0.0f ? v : v * sum.slope) : v;
}

// The fused ReLU's mask in the backward passes. The Scale's output t = ScaleShift(y, ...) is
// positive exactly where the ReLU's output is, so the mask comes from x_norm (y) and the Scale
// without reading the top. scale == nullptr: no ReLU.
struct ReluMask {
  const float* scale = nullptr;
  const float* bias = nullptr;
  float slope = 0.0f;
};
__device__ __forceinline__ float Masked(const ReluMask& m, float s, float b, float y, float dy) {
  return ScaleShift(y, s, b, m.bias != nullptr) > 0.0f ? dy : dy * m.slope;
}

// Where the backward passes take x_norm (y) from: the kept copy (mean == nullptr), or the
// bottom x normalised again (BatchNormLayer::KeepInput) with the statistics Forward used. The
// kernels take the choice as a template argument too (kFromInput), so that those reading the
// copy compile as they did without the choice (the extra per-channel values cost registers, and
// the NHWC gradient sums fall below two blocks a multiprocessor with them).
struct YSource {
  const float* mean = nullptr;
  const float* std_dev = nullptr;
  bool divide = false;
};
// x_norm as Forward computed it from x, and as the kept copy holds it: rounded to T.
template <typename T>
__device__ __forceinline__ float Normalised(float x, float mu, float sd, float inv_sd,
                                            bool divide) {
  const float v = divide ? (x - mu) / sd : (x - mu) * inv_sd;
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return Widen(Narrow<T>(v));
  }
}

// A channel's batch mean, variance and std from the sums of x - shift and (x - shift)^2 over
// its m values (the single-pass variance, free of cancellation thanks to the shift).
struct BatchStatistics {
  float mean, variance, sd;
};
__device__ __forceinline__ BatchStatistics FromSums(double2 sums, double m, float shift,
                                                    float eps) {
  const double shifted_mean = sums.x / m;
  BatchStatistics b;
  b.mean = static_cast<float>(shift + shifted_mean);
  b.variance = static_cast<float>(fmax(sums.y / m - shifted_mean * shifted_mean, 0.0));
  b.sd = sqrtf(b.variance + eps);
  return b;
}
// Channel c's stored mean and std, and the running sums mean_sum = f * mean_sum + mean,
// var_sum = f * var_sum + m / (m - 1) * var, norm = f * norm + 1 (once, by channel 0).
__device__ __forceinline__ void StoreStatistics(int c, const BatchStatistics& b, float fraction,
                                                float bias_correction, float* mean, float* std_dev,
                                                float* mean_sum, float* var_sum, float* norm) {
  mean[c] = b.mean;
  std_dev[c] = b.sd;
  mean_sum[c] = fraction * mean_sum[c] + b.mean;
  var_sum[c] = fraction * var_sum[c] + bias_correction * b.variance;
  if (c == 0) norm[0] = norm[0] * fraction + 1.0f;
}
// Channel c's gradient sums A = sum(h) and B = sum(h * y) over m values: mean_dy = A / m,
// mean_dyy = B / m, and the Scale's diffs scale_grad += B, bias_grad += A (each when given).
__device__ __forceinline__ void StoreGradientSums(int c, double2 sums, double m, float* mean_dy,
                                                  float* mean_dyy, float* scale_grad,
                                                  float* bias_grad) {
  mean_dy[c] = static_cast<float>(sums.x / m);
  mean_dyy[c] = static_cast<float>(sums.y / m);
  if (scale_grad != nullptr) scale_grad[c] += static_cast<float>(sums.y);
  if (bias_grad != nullptr) bias_grad[c] += static_cast<float>(sums.x);
}

// Block (c, part): over its chunk of channel c, either (kGradient) the sums of a and a * b, or
// the sums of a - k and (a - k)^2 with k the channel's first value (stored in shift[c]).
// kGradient with a ReLU mask: a is dy masked by the ReLU (b is x_norm).
template <int V, bool kGradient, typename T, bool kFromInput = false>
__global__ void ChannelPartials(ChannelLayout layout, const T* a, const T* b, YSource from,
                                ReluMask mask, float* shift, double2* partials) {
  const int c = blockIdx.x / layout.parts;
  const int part = blockIdx.x - c * layout.parts;
  const uint32_t begin = static_cast<uint32_t>(part) * layout.chunk_units;
  const uint32_t end = min(begin + layout.chunk_units, layout.units);
  const float k = kGradient || layout.units == 0
                      ? 0.0f
                      : Widen(a[static_cast<int64_t>(c) * layout.rows.divisor * V]);
  float s1[V], s2[V];
  for (int i = 0; i < V; ++i) s1[i] = s2[i] = 0.0f;
  const float mu = kFromInput ? from.mean[c] : 0.0f;
  const float sd = kFromInput ? from.std_dev[c] : 1.0f, inv_sd = 1.0f / sd;
  for (uint32_t q = begin + threadIdx.x; q < end; q += blockDim.x) {
    const int64_t at = layout.At(q, c);
    const Pack<V> x = Load<V>(a, at);
    if constexpr (kGradient) {
      Pack<V> y = Load<V>(b, at);
      if constexpr (kFromInput) {
        for (int i = 0; i < V; ++i) y.v[i] = Normalised<T>(y.v[i], mu, sd, inv_sd, from.divide);
      }
      if (mask.scale != nullptr) {
        const float ms = mask.scale[c];
        const float mb = mask.bias != nullptr ? mask.bias[c] : 0.0f;
        for (int i = 0; i < V; ++i) {
          const float g = Masked(mask, ms, mb, y.v[i], x.v[i]);
          s1[i] += g;
          s2[i] += g * y.v[i];
        }
      } else {
        for (int i = 0; i < V; ++i) {
          s1[i] += x.v[i];
          s2[i] += x.v[i] * y.v[i];
        }
      }
    } else {
      for (int i = 0; i < V; ++i) {
        const float d = x.v[i] - k;
        s1[i] += d;
        s2[i] += d * d;
      }
    }
  }
  double t1 = 0.0, t2 = 0.0;
  for (int i = 0; i < V; ++i) {
    t1 += s1[i];
    t2 += s2[i];
  }
  const double2 total = BlockSum2(t1, t2);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = total;
    if (!kGradient && part == 0) shift[c] = k;
  }
}

// Blocks run in reverse order of ChannelPartials', so the chunks it read last (still in L2) come
// first. With partials: the channel's batch mean and variance, its std, and (part 0) mean, std
// and the running sums mean_sum = f * mean_sum + mean, var_sum = f * var_sum + m / (m - 1) *
// var, norm = f * norm + 1. Without: mean and std as stored. Then x_norm = top = (x - mean) /
// std (divided, as the CPU code, to round alike; `divide` false: multiplied by 1 / std, see
// Divides); may be in place. Fused (scale given): top =
// x_norm * s[c] (+ b[c]), then the ReLU of slope relu_slope when relu. In a 16-bit T the fused top
// comes from x_norm as stored (rounded to T), as AffineFromNormalised and the backward mask see it.
// kResidual: then the folded sum (AddToSum).
template <int V, typename T, bool kResidual = false>
__global__ void Normalize(ChannelLayout layout, const T* x, const double2* partials,
                          const float* shift, float fraction, float bias_correction, float eps,
                          float* mean, float* std_dev, float* mean_sum, float* var_sum, float* norm,
                          const float* scale, const float* bias, bool relu, float relu_slope,
                          bool divide, FoldedSum<T> sum, T* x_norm, T* top) {
  const int block = gridDim.x - 1 - blockIdx.x;
  const int c = block / layout.parts;
  const int part = block - c * layout.parts;
  __shared__ float stats[2];
  if (partials != nullptr) {
    const double2 sums =
        CombineParts(partials + static_cast<int64_t>(c) * layout.parts, layout.parts);
    if (threadIdx.x == 0) {
      const BatchStatistics b =
          FromSums(sums, static_cast<double>(layout.units) * V, shift[c], eps);
      stats[0] = b.mean;
      stats[1] = b.sd;
      if (part == 0) {
        StoreStatistics(c, b, fraction, bias_correction, mean, std_dev, mean_sum, var_sum, norm);
      }
    }
  } else if (threadIdx.x == 0) {
    stats[0] = mean[c];
    stats[1] = std_dev[c];
  }
  __syncthreads();
  const float mu = stats[0], sd = stats[1], inv_sd = 1.0f / sd;
  const uint32_t begin = static_cast<uint32_t>(part) * layout.chunk_units;
  const uint32_t end = min(begin + layout.chunk_units, layout.units);
  for (uint32_t q = begin + threadIdx.x; q < end; q += blockDim.x) {
    const int64_t at = layout.At(q, c);
    Pack<V> v = Load<V>(x, at);
    if (divide) {
      for (int i = 0; i < V; ++i) v.v[i] = (v.v[i] - mu) / sd;
    } else {
      for (int i = 0; i < V; ++i) v.v[i] = (v.v[i] - mu) * inv_sd;
    }
    if (x_norm != nullptr) Store<V>(x_norm, at, v);
    if (scale != nullptr) {
      if constexpr (!std::is_same_v<T, float>) {
        for (int i = 0; i < V; ++i) v.v[i] = Widen(Narrow<T>(v.v[i]));
      }
      const float s = scale[c];
      const float b = bias != nullptr ? bias[c] : 0.0f;
      for (int i = 0; i < V; ++i) {
        const float t = ScaleShift(v.v[i], s, b, bias != nullptr);
        v.v[i] = relu ? Relu(t, relu_slope) : t;
      }
    }
    if constexpr (kResidual) {
      const Pack<V> r = Load<V>(sum.a, at);
      for (int i = 0; i < V; ++i) v.v[i] = AddToSum(sum, v.v[i], r.v[i]);
    }
    Store<V>(top, at, v);
  }
}

// The stored statistics: mean_sum / norm and var_sum / norm (all zero while norm is 0).
__global__ void GlobalStatistics(int channels, const float* mean_sum, const float* var_sum,
                                 const float* norm, float eps, float* mean, float* std_dev) {
  CORTADO_KERNEL_LOOP(c, channels) {
    const float factor = norm[0] == 0.0f ? 0.0f : 1.0f / norm[0];
    mean[c] = factor * mean_sum[c];
    std_dev[c] = sqrtf(factor * var_sum[c] + eps);
  }
}

// Reverse block order as Normalize. h = dy, masked by the ReLU when `mask` has one; g = s[c] *
// h when scale is given (fused), else h. With partials, their sums A = sum(h) and B = sum(h * y)
// go (part 0) to mean_dy = A / m and mean_dyy = B / m and into the Scale's diffs (scale_grad +=
// B, bias_grad += A, each when given). dx (when given): with batch statistics (subtract) dx = (g -
// s * A / m - s * B / m * y) / std, else (stored statistics, constants) dx = g / std. May be in
// place (dx == dy).
template <int V, typename T, bool kFromInput = false>
__global__ void BatchBackward(ChannelLayout layout, const T* dy, const T* y, YSource from,
                              ReluMask mask, const float* scale, const double2* partials,
                              bool subtract, const float* std_dev, float* mean_dy, float* mean_dyy,
                              float* scale_grad, float* bias_grad, bool divide, T* dx) {
  const int block = gridDim.x - 1 - blockIdx.x;
  const int c = block / layout.parts;
  const int part = block - c * layout.parts;
  __shared__ float means[2];
  if (partials != nullptr) {
    const double2 sums =
        CombineParts(partials + static_cast<int64_t>(c) * layout.parts, layout.parts);
    if (threadIdx.x == 0) {
      const double m = static_cast<double>(layout.units) * V;
      const double s = scale != nullptr ? scale[c] : 1.0;
      means[0] = static_cast<float>(s * sums.x / m);
      means[1] = static_cast<float>(s * sums.y / m);
      if (part == 0) StoreGradientSums(c, sums, m, mean_dy, mean_dyy, scale_grad, bias_grad);
    }
    __syncthreads();
  }
  if (dx == nullptr) return;
  const float sd = std_dev[c], inv_sd = 1.0f / sd;
  const float y_mu = kFromInput ? from.mean[c] : 0.0f;
  const float s = scale != nullptr ? scale[c] : 1.0f;
  const float a = subtract ? means[0] : 0.0f, b = subtract ? means[1] : 0.0f;
  const float mask_s = mask.scale != nullptr ? mask.scale[c] : 1.0f;
  const float mask_b = mask.bias != nullptr ? mask.bias[c] : 0.0f;
  const uint32_t begin = static_cast<uint32_t>(part) * layout.chunk_units;
  const uint32_t end = min(begin + layout.chunk_units, layout.units);
  for (uint32_t q = begin + threadIdx.x; q < end; q += blockDim.x) {
    const int64_t at = layout.At(q, c);
    Pack<V> g = Load<V>(dy, at);
    Pack<V> v{};
    if (mask.scale != nullptr || subtract) {
      v = Load<V>(y, at);
      if constexpr (kFromInput) {
        for (int i = 0; i < V; ++i) v.v[i] = Normalised<T>(v.v[i], y_mu, sd, inv_sd, from.divide);
      }
    }
    if (mask.scale != nullptr) {
      for (int i = 0; i < V; ++i) g.v[i] = Masked(mask, mask_s, mask_b, v.v[i], g.v[i]);
    }
    if (scale != nullptr) {
      for (int i = 0; i < V; ++i) g.v[i] *= s;
    }
    if (divide) {
      for (int i = 0; i < V; ++i) g.v[i] = (subtract ? g.v[i] - a - b * v.v[i] : g.v[i]) / sd;
    } else {
      for (int i = 0; i < V; ++i) g.v[i] = (subtract ? g.v[i] - a - b * v.v[i] : g.v[i]) * inv_sd;
    }
    Store<V>(dx, at, g);
  }
}

// Whether the passes divide by the standard deviation, as the CPU code does (float32 blobs, so
// that the two round alike), or multiply by its reciprocal: in a 16-bit type the results differ
// from the quotient by an ulp of float32 at most before they are rounded to 16 bits, and the
// division's instruction sequence per value is gone. CORTADO_BN_DIVIDE=1 divides in 16 bits too.
template <typename T>
bool Divides() {
  if constexpr (std::is_same_v<T, float>) {
    return true;
  } else {
    const char* v = std::getenv("CORTADO_BN_DIVIDE");
    return v != nullptr && std::string(v) == "1";
  }
}

// 16-bit blobs move eight values per 16-byte access where the plane's size and every pointer
// allow (null pointers aside); float32 blobs stay at four (CORTADO_BN_PACK=4: four for 16-bit
// blobs too, for comparison).
template <typename T>
constexpr int WidePack() {
  return std::is_same_v<T, float> ? 4 : 8;
}
template <typename T>
bool Wide(int spatial, std::initializer_list<const void*> pointers) {
  if (std::is_same_v<T, float> || spatial % 8 != 0) return false;
  const char* v = std::getenv("CORTADO_BN_PACK");
  if (v != nullptr && std::string(v) == "4") return false;
  for (const void* p : pointers) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// The chunking of a [num, channels, spatial] tensor for V-value units.
ChannelLayout MakeLayout(int num, int channels, int spatial, int v) {
  return cuda::MakeChannelLayout(num, channels, spatial, v, kChunk);
}

// Workspace for the partials of every block and (after them) the per-channel shifts.
// (ChannelLayout or, below, NhwcLayout: either has a partial per channel and part.)
template <typename Layout>
double2* Partials(Context& ctx, const Layout& layout, float** shift) {
  const size_t blocks = static_cast<size_t>(layout.channels) * layout.parts;
  auto* partials = static_cast<double2*>(
      cuda::Get(ctx).Workspace(blocks * sizeof(double2) + layout.channels * sizeof(float)));
  if (shift != nullptr) *shift = reinterpret_cast<float*>(partials + blocks);
  return partials;
}

// The fused Scale and ReLU, as the GPU passes take them.
struct FusedOps {
  const float* scale = nullptr;
  const float* bias = nullptr;
  bool relu = false;
  float relu_slope = 0.0f;
};

template <int V, typename T>
void LaunchForward(Context& ctx, int num, int channels, int spatial, bool batch_statistics,
                   const T* x, float fraction, float bias_correction, float eps, float* mean,
                   float* std_dev, float* mean_sum, float* var_sum, float* norm,
                   const FusedOps& fused, const FoldedSum<T>& sum, T* x_norm, T* top) {
  const ChannelLayout layout = MakeLayout(num, channels, spatial, V);
  const int blocks = channels * layout.parts;
  if (blocks == 0) return;
  const cudaStream_t stream = cuda::Stream(ctx);
  double2* partials = nullptr;
  float* shift = nullptr;
  if (batch_statistics) {
    partials = Partials(ctx, layout, &shift);
    ChannelPartials<V, false, T><<<blocks, cuda::kThreads, 0, stream>>>(
        layout, x, nullptr, YSource{}, ReluMask{}, shift, partials);
    CORTADO_CUDA_CHECK_LAUNCH();
  }
  (sum.a != nullptr ? Normalize<V, T, true>
                    : Normalize<V, T, false>)<<<blocks, cuda::kThreads, 0, stream>>>(
      layout, x, partials, shift, fraction, bias_correction, eps, mean, std_dev, mean_sum, var_sum,
      norm, fused.scale, fused.bias, fused.relu, fused.relu_slope, Divides<T>(), sum, x_norm, top);
  CORTADO_CUDA_CHECK_LAUNCH();
}

// Partial sums are taken when batch statistics need them or the Scale's diffs are wanted.
template <int V, typename T>
void LaunchBackward(Context& ctx, int num, int channels, int spatial, bool batch_statistics,
                    bool sums, const T* dy, const T* y, const YSource& from, const ReluMask& mask,
                    const float* scale, const float* std_dev, float* mean_dy, float* mean_dyy,
                    float* scale_grad, float* bias_grad, T* dx) {
  const ChannelLayout layout = MakeLayout(num, channels, spatial, V);
  const int blocks = channels * layout.parts;
  if (blocks == 0) return;
  const cudaStream_t stream = cuda::Stream(ctx);
  double2* partials = nullptr;
  if (sums) {
    partials = Partials(ctx, layout, nullptr);
    (from.mean != nullptr
         ? ChannelPartials<V, true, T, true>
         : ChannelPartials<V, true, T, false>)<<<blocks, cuda::kThreads, 0, stream>>>(
        layout, dy, y, from, mask, nullptr, partials);
    CORTADO_CUDA_CHECK_LAUNCH();
  }
  (from.mean != nullptr ? BatchBackward<V, T, true>
                        : BatchBackward<V, T, false>)<<<blocks, cuda::kThreads, 0, stream>>>(
      layout, dy, y, from, mask, scale, partials, batch_statistics, std_dev, mean_dy, mean_dyy,
      scale_grad, bias_grad, Divides<T>(), dx);
  CORTADO_CUDA_CHECK_LAUNCH();
}

// top = x_norm * s (+ b), ReLU'd, rounded as Normalize rounds it: one block per (n, c) plane of
// `units` packs of V values at a time, so the channel comes from one division per plane.
template <int V, typename T>
__global__ void AffineFromNormalised(int64_t planes, int channels, int units, const T* x_norm,
                                     const float* scale, const float* bias, bool relu,
                                     float relu_slope, T* top) {
  for (int64_t plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    const int c = static_cast<int>(plane % channels);
    const float s = scale[c];
    const float b = bias != nullptr ? bias[c] : 0.0f;
    const int64_t base = plane * units;
    for (int j = threadIdx.x; j < units; j += blockDim.x) {
      Pack<V> v = Load<V>(x_norm, base + j);
      for (int i = 0; i < V; ++i) {
        const float t = ScaleShift(v.v[i], s, b, bias != nullptr);
        v.v[i] = relu ? Relu(t, relu_slope) : t;
      }
      Store<V>(top, base + j, v);
    }
  }
}

// ---- channels-last blobs (Tensor::home_nhwc) -----------------------------------------------
// A [rows = N * H * W][channels] tensor read in units of V channels (V = 8: 16 bytes of a 16-bit
// type; V = 1 otherwise), `units` = channels / V per row. A block takes rows_per_block rows; its
// threads own one unit column each (and, for rows of fewer than kThreads units, `groups` threads
// share a column, taking every groups-th row), so each thread loads its channels' parameters
// once and then streams rows. Per-channel sums: float per thread, double across the block's
// groups in a fixed order, one double2 per (block, channel); a small kernel then adds each
// channel's partials in a fixed order (one warp per channel) and finishes the statistics, so the
// element-wise pass reads them ready. Fixed grid, fixed order, no atomics: repeatable bit for
// bit, as the NCHW passes above.
struct NhwcLayout {
  int64_t rows;
  int channels, units, groups, rows_per_block, parts;
};

// Rows per thread, 32 in every pass: their partials, one per block and channel, stay a few
// percent of the data. On an H200, ResNet-50 float16 ran 1.8% faster with 32 and 32 than with 64
// in the reductions and 16 in the element-wise passes (bench/RESULTS.md).
constexpr int kNhwcSumRows = 32;
constexpr int kNhwcElementRows = 32;

NhwcLayout MakeNhwcLayout(int64_t rows, int channels, int v, int rows_per_thread) {
  NhwcLayout l;
  l.rows = rows;
  l.channels = channels;
  l.units = channels / v;
  l.groups = l.units <= cuda::kThreads ? cuda::kThreads / l.units : 1;
  l.rows_per_block = l.groups * rows_per_thread;
  l.parts =
      static_cast<int>(std::max<int64_t>((rows + l.rows_per_block - 1) / l.rows_per_block, 1));
  return l;
}

// This thread's column (unit) in the column block starting at j0, its first row's offset in the
// block, and whether it has a column at all.
struct NhwcThread {
  int group, unit;
  bool active;
};
__device__ __forceinline__ NhwcThread NhwcThreadAt(const NhwcLayout& l, int j0) {
  NhwcThread t;
  if (l.units <= cuda::kThreads) {
    t.group = threadIdx.x / l.units;
    t.unit = threadIdx.x - t.group * l.units;
    t.active = t.group < l.groups;
  } else {
    t.group = 0;
    t.unit = j0 + threadIdx.x;
    t.active = t.unit < l.units;
  }
  return t;
}

// This thread's rows of its unit column, r0 + group, r0 + group + groups, ... below r1, four at a
// time: load(at) for all four first, then body(at, loaded) for each (at: the unit's index). The
// loads of a batch are in flight together, and a pass in place (top == x) stays correct: each
// thread reads only what it then writes.
template <typename Load, typename Body>
__device__ __forceinline__ void EachRow(const NhwcLayout& l, const NhwcThread& t, int64_t r0,
                                        int64_t r1, Load load, Body body) {
  constexpr int kBatch = 4;
  const int64_t step = l.groups;
  int64_t r = r0 + t.group;
  for (; r + (kBatch - 1) * step < r1; r += kBatch * step) {
    decltype(load(int64_t{0})) v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) v[k] = load((r + k * step) * l.units + t.unit);
#pragma unroll
    for (int k = 0; k < kBatch; ++k) body((r + k * step) * l.units + t.unit, v[k]);
  }
  for (; r < r1; r += step) {
    const int64_t at = r * l.units + t.unit;
    body(at, load(at));
  }
}

template <int V>
struct TwoPacks {
  Pack<V> a, b;
};

// Block `part`: per channel, either (kGradient) the sums of a (dy, masked by the ReLU when
// `mask` has one) and a * b (b = x_norm), or the sums of a - k and (a - k)^2 with k the channel's
// value in row 0 (stored in shift[c] by part 0). partials[part * channels + c].
// The body of the kernels below.
template <int V, bool kGradient, typename T, bool kFromInput>
__device__ __forceinline__ void NhwcPartialsBody(const NhwcLayout& l, const T* a, const T* b,
                                                 const YSource& from, const ReluMask& mask,
                                                 float* shift, double2* partials) {
  __shared__ float2 spread[cuda::kThreads * V];
  const int part = blockIdx.x;
  const int64_t r0 = static_cast<int64_t>(part) * l.rows_per_block;
  const int64_t r1 = min(r0 + l.rows_per_block, l.rows);
  for (int j0 = 0; j0 < l.units; j0 += cuda::kThreads) {
    const NhwcThread t = NhwcThreadAt(l, j0);
    // With kFromInput, x_norm = (x - mu) / d or (x - mu) * d: d is the std when dividing,
    // else its reciprocal (one array rather than two, for the registers).
    float s1[V], s2[V], k[V], ms[V], mb[V], mu[V], d[V];
    for (int i = 0; i < V; ++i) s1[i] = s2[i] = k[i] = 0.0f;
    if (t.active) {
      if constexpr (kGradient && kFromInput) {
        for (int i = 0; i < V; ++i) {
          mu[i] = from.mean[t.unit * V + i];
          const float sd = from.std_dev[t.unit * V + i];
          d[i] = from.divide ? sd : 1.0f / sd;
        }
      }
      if constexpr (!kGradient) {
        if (l.rows > 0) {
          const Pack<V> first = Load<V>(a, t.unit);
          for (int i = 0; i < V; ++i) k[i] = first.v[i];
        }
      } else if (mask.scale != nullptr) {
        for (int i = 0; i < V; ++i) {
          ms[i] = mask.scale[t.unit * V + i];
          mb[i] = mask.bias != nullptr ? mask.bias[t.unit * V + i] : 0.0f;
        }
      }
      if constexpr (kGradient) {
        EachRow(
            l, t, r0, r1,
            [&](int64_t at) {
              return TwoPacks<V>{Load<V>(a, at), Load<V>(b, at)};
            },
            [&](int64_t, TwoPacks<V> p) {
              if constexpr (kFromInput) {
                for (int i = 0; i < V; ++i) {
                  p.b.v[i] = Normalised<T>(p.b.v[i], mu[i], d[i], d[i], from.divide);
                }
              }
              if (mask.scale != nullptr) {
                for (int i = 0; i < V; ++i) {
                  const float g = Masked(mask, ms[i], mb[i], p.b.v[i], p.a.v[i]);
                  s1[i] += g;
                  s2[i] += g * p.b.v[i];
                }
              } else {
                for (int i = 0; i < V; ++i) {
                  s1[i] += p.a.v[i];
                  s2[i] += p.a.v[i] * p.b.v[i];
                }
              }
            });
      } else {
        EachRow(
            l, t, r0, r1, [&](int64_t at) { return Load<V>(a, at); },
            [&](int64_t, const Pack<V>& x) {
              for (int i = 0; i < V; ++i) {
                const float d = x.v[i] - k[i];
                s1[i] += d;
                s2[i] += d * d;
              }
            });
      }
    }
    if (l.groups > 1) {
      for (int i = 0; i < V; ++i) spread[threadIdx.x * V + i] = make_float2(s1[i], s2[i]);
      __syncthreads();
      if (threadIdx.x < l.units) {
        for (int i = 0; i < V; ++i) {
          double d1 = 0.0, d2 = 0.0;
          for (int g = 0; g < l.groups; ++g) {
            const float2 v = spread[(g * l.units + threadIdx.x) * V + i];
            d1 += v.x;
            d2 += v.y;
          }
          const int c = threadIdx.x * V + i;
          partials[static_cast<int64_t>(part) * l.channels + c] = make_double2(d1, d2);
          if (!kGradient && part == 0) shift[c] = k[i];
        }
      }
      __syncthreads();
    } else if (t.active) {
      for (int i = 0; i < V; ++i) {
        const int c = t.unit * V + i;
        partials[static_cast<int64_t>(part) * l.channels + c] = make_double2(s1[i], s2[i]);
        if (!kGradient && part == 0) shift[c] = k[i];
      }
    }
  }
}

template <int V, bool kGradient, typename T>
__global__ void __launch_bounds__(cuda::kThreads)
    NhwcPartials(NhwcLayout l, const T* a, const T* b, ReluMask mask, float* shift,
                 double2* partials) {
  NhwcPartialsBody<V, kGradient, T, false>(l, a, b, YSource{}, mask, shift, partials);
}

// The gradient sums with x_norm from the kept input (BatchNormLayer::KeepInput), held to 128
// registers so that two blocks share a multiprocessor, as they do reading the copy.
template <int V, typename T>
__global__ void __launch_bounds__(cuda::kThreads, 2)
    NhwcGradientPartialsFromInput(NhwcLayout l, const T* dy, const T* x, YSource from,
                                  ReluMask mask, double2* partials) {
  NhwcPartialsBody<V, true, T, true>(l, dy, x, from, mask, nullptr, partials);
}

// Channel c's partials summed in a fixed order (lane-strided, then a fixed shuffle tree), in
// lane 0 of the warp.
__device__ double2 WarpChannelSum(const NhwcLayout& l, const double2* partials, int c) {
  const int lane = threadIdx.x % 32;
  double a = 0.0, b = 0.0;
  for (int p = lane; p < l.parts; p += 32) {
    const double2 v = partials[static_cast<int64_t>(p) * l.channels + c];
    a += v.x;
    b += v.y;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, offset);
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  return make_double2(a, b);
}

// One warp per channel: the batch mean, variance and std (as Normalize computes them from the
// same sums), and the running sums.
__global__ void NhwcStatistics(NhwcLayout l, const double2* partials, const float* shift,
                               float fraction, float bias_correction, float eps, float* mean,
                               float* std_dev, float* mean_sum, float* var_sum, float* norm) {
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (c >= l.channels) return;
  const double2 sums = WarpChannelSum(l, partials, c);
  if (threadIdx.x % 32 != 0) return;
  StoreStatistics(c, FromSums(sums, static_cast<double>(l.rows), shift[c], eps), fraction,
                  bias_correction, mean, std_dev, mean_sum, var_sum, norm);
}

// One warp per channel: mean_dy = A / m and mean_dyy = B / m of the gradient sums, and the
// Scale's diffs (scale_grad += B, bias_grad += A, each when given).
__global__ void NhwcGradientSums(NhwcLayout l, const double2* partials, float* mean_dy,
                                 float* mean_dyy, float* scale_grad, float* bias_grad) {
  const int c = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (c >= l.channels) return;
  const double2 sums = WarpChannelSum(l, partials, c);
  if (threadIdx.x % 32 != 0) return;
  StoreGradientSums(c, sums, static_cast<double>(l.rows), mean_dy, mean_dyy, scale_grad, bias_grad);
}

// x_norm = (x - mean) / std (or times 1 / std, `divide` false) and the fused top, as Normalize
// (kResidual: the folded sum too). The body of the two kernels below.
template <int V, typename T, bool kResidual>
__device__ __forceinline__ void NhwcNormalizeBody(const NhwcLayout& l, const T* x,
                                                  const float* mean, const float* std_dev,
                                                  const float* scale, const float* bias, bool relu,
                                                  float relu_slope, bool divide,
                                                  const FoldedSum<T>& sum, T* x_norm, T* top) {
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * l.rows_per_block;
  const int64_t r1 = min(r0 + l.rows_per_block, l.rows);
  for (int j0 = 0; j0 < l.units; j0 += cuda::kThreads) {
    const NhwcThread t = NhwcThreadAt(l, j0);
    if (!t.active) continue;
    float mu[V], sd[V], inv_sd[V], s[V], b[V];
    for (int i = 0; i < V; ++i) {
      const int c = t.unit * V + i;
      mu[i] = mean[c];
      sd[i] = std_dev[c];
      inv_sd[i] = 1.0f / sd[i];
      s[i] = scale != nullptr ? scale[c] : 1.0f;
      b[i] = bias != nullptr ? bias[c] : 0.0f;
    }
    EachRow(
        l, t, r0, r1,
        [&](int64_t at) {
          if constexpr (kResidual) {
            return TwoPacks<V>{Load<V>(x, at), Load<V>(sum.a, at)};
          } else {
            return Load<V>(x, at);
          }
        },
        [&](int64_t at, auto loaded) {
          Pack<V> v;
          if constexpr (kResidual) {
            v = loaded.a;
          } else {
            v = loaded;
          }
          if (divide) {
            for (int i = 0; i < V; ++i) v.v[i] = (v.v[i] - mu[i]) / sd[i];
          } else {
            for (int i = 0; i < V; ++i) v.v[i] = (v.v[i] - mu[i]) * inv_sd[i];
          }
          if (x_norm != nullptr) Store<V>(x_norm, at, v);
          if (scale != nullptr) {
            if constexpr (!std::is_same_v<T, float>) {
              for (int i = 0; i < V; ++i) v.v[i] = Widen(Narrow<T>(v.v[i]));
            }
            for (int i = 0; i < V; ++i) {
              const float u = ScaleShift(v.v[i], s[i], b[i], bias != nullptr);
              v.v[i] = relu ? Relu(u, relu_slope) : u;
            }
          }
          if constexpr (kResidual) {
            for (int i = 0; i < V; ++i) v.v[i] = AddToSum(sum, v.v[i], loaded.b.v[i]);
          }
          Store<V>(top, at, v);
        });
  }
}

template <int V, typename T>
__global__ void __launch_bounds__(cuda::kThreads)
    NhwcNormalize(NhwcLayout l, const T* x, const float* mean, const float* std_dev,
                  const float* scale, const float* bias, bool relu, float relu_slope, bool divide,
                  T* x_norm, T* top) {
  NhwcNormalizeBody<V, T, false>(l, x, mean, std_dev, scale, bias, relu, relu_slope, divide,
                                 FoldedSum<T>{}, x_norm, top);
}

// With the folded sum, held to 128 registers so that two blocks share a multiprocessor, as they
// do without it (unbounded, the 16-bit kernels took 130).
template <int V, typename T>
__global__ void __launch_bounds__(cuda::kThreads, 2)
    NhwcNormalizeAndSum(NhwcLayout l, const T* x, const float* mean, const float* std_dev,
                        const float* scale, const float* bias, bool relu, float relu_slope,
                        bool divide, FoldedSum<T> sum, T* x_norm, T* top) {
  NhwcNormalizeBody<V, T, true>(l, x, mean, std_dev, scale, bias, relu, relu_slope, divide, sum,
                                x_norm, top);
}

// dx as BatchBackward computes it; the means a = s * mean_dy and b = s * mean_dyy when
// `subtract` (batch statistics).
template <int V, typename T, bool kFromInput = false>
__global__ void __launch_bounds__(cuda::kThreads)
    NhwcBackward(NhwcLayout l, const T* dy, const T* y, YSource from, ReluMask mask,
                 const float* scale, bool subtract, const float* std_dev, const float* mean_dy,
                 const float* mean_dyy, bool divide, T* dx) {
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * l.rows_per_block;
  const int64_t r1 = min(r0 + l.rows_per_block, l.rows);
  for (int j0 = 0; j0 < l.units; j0 += cuda::kThreads) {
    const NhwcThread t = NhwcThreadAt(l, j0);
    if (!t.active) continue;
    float sd[V], inv_sd[V], s[V], a[V], b[V], ms[V], mb[V], mu[V];
    for (int i = 0; i < V; ++i) {
      const int c = t.unit * V + i;
      mu[i] = kFromInput ? from.mean[c] : 0.0f;
      sd[i] = std_dev[c];
      inv_sd[i] = 1.0f / sd[i];
      s[i] = scale != nullptr ? scale[c] : 1.0f;
      a[i] = subtract ? s[i] * mean_dy[c] : 0.0f;
      b[i] = subtract ? s[i] * mean_dyy[c] : 0.0f;
      ms[i] = mask.scale != nullptr ? mask.scale[c] : 1.0f;
      mb[i] = mask.bias != nullptr ? mask.bias[c] : 0.0f;
    }
    const bool read_y = mask.scale != nullptr || subtract;
    EachRow(
        l, t, r0, r1,
        [&](int64_t at) {
          TwoPacks<V> p;
          p.a = Load<V>(dy, at);
          if (read_y) {
            p.b = Load<V>(y, at);
            if constexpr (kFromInput) {
              for (int i = 0; i < V; ++i) {
                p.b.v[i] = Normalised<T>(p.b.v[i], mu[i], sd[i], inv_sd[i], from.divide);
              }
            }
          } else {
            for (int i = 0; i < V; ++i) p.b.v[i] = 0.0f;
          }
          return p;
        },
        [&](int64_t at, TwoPacks<V> p) {
          Pack<V>& g = p.a;
          const Pack<V>& v = p.b;
          if (mask.scale != nullptr) {
            for (int i = 0; i < V; ++i) g.v[i] = Masked(mask, ms[i], mb[i], v.v[i], g.v[i]);
          }
          if (scale != nullptr) {
            for (int i = 0; i < V; ++i) g.v[i] *= s[i];
          }
          for (int i = 0; i < V; ++i) {
            const float d = subtract ? g.v[i] - a[i] - b[i] * v.v[i] : g.v[i];
            g.v[i] = divide ? d / sd[i] : d * inv_sd[i];
          }
          Store<V>(dx, at, g);
        });
  }
}

// top = relu(x_norm * s + b) as NhwcNormalize writes it.
template <int V, typename T>
__global__ void __launch_bounds__(cuda::kThreads)
    NhwcAffine(NhwcLayout l, const T* x_norm, const float* scale, const float* bias, bool relu,
               float relu_slope, T* top) {
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * l.rows_per_block;
  const int64_t r1 = min(r0 + l.rows_per_block, l.rows);
  for (int j0 = 0; j0 < l.units; j0 += cuda::kThreads) {
    const NhwcThread t = NhwcThreadAt(l, j0);
    if (!t.active) continue;
    float s[V], b[V];
    for (int i = 0; i < V; ++i) {
      s[i] = scale[t.unit * V + i];
      b[i] = bias != nullptr ? bias[t.unit * V + i] : 0.0f;
    }
    EachRow(
        l, t, r0, r1, [&](int64_t at) { return Load<V>(x_norm, at); },
        [&](int64_t at, Pack<V> v) {
          for (int i = 0; i < V; ++i) {
            const float u = ScaleShift(v.v[i], s[i], b[i], bias != nullptr);
            v.v[i] = relu ? Relu(u, relu_slope) : u;
          }
          Store<V>(top, at, v);
        });
  }
}

// Eight channels per 16-byte unit where the channel count and every pointer allow (null
// pointers aside), else one.
template <typename T>
int NhwcPack(int channels, std::initializer_list<const void*> pointers) {
  if constexpr (std::is_same_v<T, float>) {
    return 1;
  } else {
    if (channels % 8 != 0) return 1;
    for (const void* p : pointers) {
      if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return 1;
    }
    return 8;
  }
}

int WarpBlocks(int channels) { return (channels * 32 + cuda::kThreads - 1) / cuda::kThreads; }

template <int V, typename T>
void LaunchForwardNhwc(Context& ctx, int64_t rows, int channels, bool batch_statistics, const T* x,
                       float fraction, float bias_correction, float eps, float* mean,
                       float* std_dev, float* mean_sum, float* var_sum, float* norm,
                       const FusedOps& fused, const FoldedSum<T>& sum, T* x_norm, T* top) {
  if (rows == 0 || channels == 0) return;
  const NhwcLayout l = MakeNhwcLayout(rows, channels, V, kNhwcSumRows);
  const NhwcLayout e = MakeNhwcLayout(rows, channels, V, kNhwcElementRows);
  const cudaStream_t stream = cuda::Stream(ctx);
  if (batch_statistics) {
    float* shift = nullptr;
    double2* partials = Partials(ctx, l, &shift);
    NhwcPartials<V, false, T>
        <<<l.parts, cuda::kThreads, 0, stream>>>(l, x, nullptr, ReluMask{}, shift, partials);
    CORTADO_CUDA_CHECK_LAUNCH();
    NhwcStatistics<<<WarpBlocks(channels), cuda::kThreads, 0, stream>>>(
        l, partials, shift, fraction, bias_correction, eps, mean, std_dev, mean_sum, var_sum, norm);
    CORTADO_CUDA_CHECK_LAUNCH();
  }
  if (sum.a != nullptr) {
    NhwcNormalizeAndSum<V, T><<<e.parts, cuda::kThreads, 0, stream>>>(
        e, x, mean, std_dev, fused.scale, fused.bias, fused.relu, fused.relu_slope, Divides<T>(),
        sum, x_norm, top);
  } else {
    NhwcNormalize<V, T><<<e.parts, cuda::kThreads, 0, stream>>>(
        e, x, mean, std_dev, fused.scale, fused.bias, fused.relu, fused.relu_slope, Divides<T>(),
        x_norm, top);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

template <int V, typename T>
void LaunchBackwardNhwc(Context& ctx, int64_t rows, int channels, bool batch_statistics, bool sums,
                        const T* dy, const T* y, const YSource& from, const ReluMask& mask,
                        const float* scale, const float* std_dev, float* mean_dy, float* mean_dyy,
                        float* scale_grad, float* bias_grad, T* dx) {
  if (rows == 0 || channels == 0) return;
  const NhwcLayout l = MakeNhwcLayout(rows, channels, V, kNhwcSumRows);
  const NhwcLayout e = MakeNhwcLayout(rows, channels, V, kNhwcElementRows);
  const cudaStream_t stream = cuda::Stream(ctx);
  if (sums) {
    double2* partials = Partials(ctx, l, nullptr);
    if (from.mean != nullptr) {
      NhwcGradientPartialsFromInput<V, T>
          <<<l.parts, cuda::kThreads, 0, stream>>>(l, dy, y, from, mask, partials);
    } else {
      NhwcPartials<V, true, T>
          <<<l.parts, cuda::kThreads, 0, stream>>>(l, dy, y, mask, nullptr, partials);
    }
    CORTADO_CUDA_CHECK_LAUNCH();
    NhwcGradientSums<<<WarpBlocks(channels), cuda::kThreads, 0, stream>>>(
        l, partials, mean_dy, mean_dyy, scale_grad, bias_grad);
    CORTADO_CUDA_CHECK_LAUNCH();
  }
  if (dx == nullptr) return;
  (from.mean != nullptr ? NhwcBackward<V, T, true>
                        : NhwcBackward<V, T, false>)<<<e.parts, cuda::kThreads, 0, stream>>>(
      e, dy, y, from, mask, scale, batch_statistics, std_dev, mean_dy, mean_dyy, Divides<T>(), dx);
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace

void BatchNormLayer::RecomputeTopGpu(Tensor* top) {
  const int64_t count = top->count();
  if (count == 0) return;
  const HalfType h = HalfTensors();
  if (keep_input_) {
    // Forward's normalising pass again, from the bottom and the statistics it stored.
    ForwardPassGpu(*input_, /*batch_statistics=*/false, top);
    return;
  }
  half_values::WithValueType(h, [&](auto tag) {
    using T = decltype(tag);
    const T* x_norm = half_values::Data<T>(x_norm_, h);
    T* out = half_values::MutableData<T>(*top, h);
    const cudaStream_t stream = cuda::Stream(*ctx_);
    if (scale_ == nullptr) {
      CORTADO_CUDA_CHECK(
          cudaMemcpyAsync(out, x_norm, sizeof(T) * count, cudaMemcpyDeviceToDevice, stream));
      return;
    }
    const Affine affine = FusedAffine();
    const float* scale = affine.scale->gpu_data();
    const float* bias = affine.bias != nullptr ? affine.bias->gpu_data() : nullptr;
    if (top->home_nhwc()) {
      const int64_t rows = static_cast<int64_t>(num_) * spatial_dim_;
      const int v = NhwcPack<T>(channels_, {x_norm, out});
      const NhwcLayout l = MakeNhwcLayout(rows, channels_, v, kNhwcElementRows);
      (v == 8 ? NhwcAffine<WidePack<T>(), T>
              : NhwcAffine<1, T>)<<<l.parts, cuda::kThreads, 0, stream>>>(l, x_norm, scale, bias,
                                                                          relu_, relu_slope_, out);
      CORTADO_CUDA_CHECK_LAUNCH();
      return;
    }
    const int64_t planes = static_cast<int64_t>(num_) * channels_;
    const bool vector = spatial_dim_ % 4 == 0 && PackAligned<T>(x_norm) && PackAligned<T>(out);
    const int units = vector ? spatial_dim_ / 4 : spatial_dim_;
    const int threads = std::min(cuda::kThreads, (units + 31) / 32 * 32);
    const int blocks = static_cast<int>(std::min<int64_t>(planes, int64_t{1} << 20));
    (vector ? AffineFromNormalised<4, T>
            : AffineFromNormalised<1, T>)<<<blocks, threads, 0, stream>>>(
        planes, channels_, units, x_norm, scale, bias, relu_, relu_slope_, out);
    CORTADO_CUDA_CHECK_LAUNCH();
  });
}

void BatchNormLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  gpu_stats_.Reshape(std::vector<int>{4, channels_});
  const HalfType h = HalfTensors();
  // The kept copy lives in the type the passes use. set_home_type keeps a float32 buffer that
  // is large enough, so a buffer of the new size replaces it (half the memory in 16 bits); its
  // values do not matter, Forward writes all of them.
  if (keep_x_norm_ && !keep_input_ && x_norm_.home_type() != h) {
    x_norm_.set_home_type(h);
    x_norm_.UseDataBuffer(std::make_shared<SyncedMemory>(x_norm_.value_bytes() *
                                                         static_cast<size_t>(x_norm_.count())));
  }
  if (use_global_stats_) {
    float* mean = gpu_stats_.mutable_gpu_data();
    GlobalStatistics<<<cuda::Blocks(channels_), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
        channels_, blobs_[0]->gpu_data(), blobs_[1]->gpu_data(), blobs_[2]->gpu_data(), eps_, mean,
        mean + channels_);
    CORTADO_CUDA_CHECK_LAUNCH();
  }
  ForwardPassGpu(*bottom[0], !use_global_stats_, top[0]);
}

void BatchNormLayer::ForwardPassGpu(const Tensor& bottom, bool batch_statistics, Tensor* top) {
  float* mean = gpu_stats_.mutable_gpu_data();
  float* std_dev = mean + channels_;
  const HalfType h = HalfTensors();
  float *mean_sum = nullptr, *var_sum = nullptr, *norm = nullptr;
  float bias_correction = 1.0f;
  if (batch_statistics) {
    const int m = num_ * spatial_dim_;
    bias_correction = m > 1 ? static_cast<float>(m) / (m - 1) : 1.0f;
    mean_sum = blobs_[0]->mutable_gpu_data();
    var_sum = blobs_[1]->mutable_gpu_data();
    norm = blobs_[2]->mutable_gpu_data();
  }
  FusedOps fused;
  if (scale_ != nullptr) {
    const Affine affine = FusedAffine();
    fused.scale = affine.scale->gpu_data();
    fused.bias = affine.bias != nullptr ? affine.bias->gpu_data() : nullptr;
    fused.relu = relu_;
    fused.relu_slope = relu_slope_;
  }
  // Channels-last blobs (Layer::NhwcTensors kSame: the top in the bottom's layout; the kept
  // x_norm too).
  const bool nhwc = bottom.home_nhwc();
  CORTADO_CHECK(top->home_nhwc() == nhwc, "{}: bottom and top in different layouts", Describe());
  const bool copy = keep_x_norm_ && !keep_input_;
  if (copy && x_norm_.home_nhwc() != nhwc) x_norm_.set_home_nhwc(nhwc);
  // A folded sum's other bottom (this layer's bottom 1).
  const Tensor* residual = sum_ != nullptr ? sum_bottom_[residual_index_] : nullptr;
  CORTADO_CHECK(residual == nullptr || residual->home_nhwc() == nhwc,
                "{}: bottoms in different layouts", Describe());
  half_values::WithValueType(h, [&](auto tag) {
    using T = decltype(tag);
    const T* x = half_values::Data<T>(bottom, h);
    T* out = half_values::MutableData<T>(*top, h);
    FoldedSum<T> sum;
    if (sum_ != nullptr) {
      sum.a = half_values::Data<T>(*residual, h);
      sum.relu = sum_->fused_relu();
      sum.slope = sum_->relu_slope();
    }
    // Without a copy to keep, x_norm goes to the top alone (no Scale) or nowhere.
    T* x_norm = copy ? half_values::MutableData<T>(x_norm_, h) : scale_ == nullptr ? out : nullptr;
    if (nhwc) {
      const int64_t rows = static_cast<int64_t>(num_) * spatial_dim_;
      (NhwcPack<T>(channels_, {x, x_norm, out, sum.a}) == 8
           ? LaunchForwardNhwc<WidePack<T>(), T>
           : LaunchForwardNhwc<1, T>)(*ctx_, rows, channels_, batch_statistics, x,
                                      moving_average_fraction_, bias_correction, eps_, mean,
                                      std_dev, mean_sum, var_sum, norm, fused, sum, x_norm, out);
      return;
    }
    const bool vector = spatial_dim_ % 4 == 0 && PackAligned<T>(x) &&
                        (x_norm == nullptr || PackAligned<T>(x_norm)) && PackAligned<T>(out) &&
                        (sum.a == nullptr || PackAligned<T>(sum.a));
    const int v = !vector ? 1 : Wide<T>(spatial_dim_, {x, x_norm, out, sum.a}) ? 8 : 4;
    (v == 8   ? LaunchForward<WidePack<T>(), T>
     : v == 4 ? LaunchForward<4, T>
              : LaunchForward<1, T>)(*ctx_, num_, channels_, spatial_dim_, batch_statistics, x,
                                     moving_average_fraction_, bias_correction, eps_, mean, std_dev,
                                     mean_sum, var_sum, norm, fused, sum, x_norm, out);
  });
}

void BatchNormLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  const Affine affine = scale_ != nullptr ? FusedAffine() : Affine{};
  float* scale_grad =
      affine.scale_grad != nullptr ? affine.scale_grad->mutable_gpu_diff() : nullptr;
  float* bias_grad = affine.bias_grad != nullptr ? affine.bias_grad->mutable_gpu_diff() : nullptr;
  const bool param_grads = scale_grad != nullptr || bias_grad != nullptr;
  SumBackward(propagate_down, propagate_down[0] || param_grads);
  if (!propagate_down[0] && !param_grads) return;
  CORTADO_CHECK(keep_x_norm_, "{}: Backward after DropBackwardState", Describe());
  const HalfType h = HalfTensors();
  half_values::WithValueType(h, [&](auto tag) {
    using T = decltype(tag);
    // A folded sum's gradient is bottom 1's (SumBackward).
    const T* dy = half_values::Diff<T>(sum_ != nullptr ? *bottom[1] : *top[0], h);
    T* dx = propagate_down[0] ? half_values::MutableDiff<T>(*bottom[0], h) : nullptr;
    const float* scale = affine.scale != nullptr ? affine.scale->gpu_data() : nullptr;
    ReluMask mask;
    if (relu_) {
      mask.scale = scale;
      mask.bias = affine.bias != nullptr ? affine.bias->gpu_data() : nullptr;
      mask.slope = relu_slope_;
    }
    float* stats = gpu_stats_.mutable_gpu_data();
    const float* std_dev = stats + channels_;
    // x_norm: the kept copy, or (KeepInput) the bottom normalised again on the way.
    const T* y = half_values::Data<T>(keep_input_ ? *bottom[0] : x_norm_, h);
    const YSource from = keep_input_ ? YSource{stats, std_dev, Divides<T>()} : YSource{};
    if (bottom[0]->home_nhwc()) {
      const int64_t rows = static_cast<int64_t>(num_) * spatial_dim_;
      (NhwcPack<T>(channels_, {dy, y, dx}) == 8
           ? LaunchBackwardNhwc<WidePack<T>(), T>
           : LaunchBackwardNhwc<1, T>)(*ctx_, rows, channels_, !use_global_stats_,
                                       !use_global_stats_ || param_grads, dy, y, from, mask, scale,
                                       std_dev, stats + 2 * channels_, stats + 3 * channels_,
                                       scale_grad, bias_grad, dx);
      return;
    }
    const bool vector = spatial_dim_ % 4 == 0 && PackAligned<T>(dy) && PackAligned<T>(y) &&
                        (dx == nullptr || PackAligned<T>(dx));
    const int v = !vector ? 1 : Wide<T>(spatial_dim_, {dy, y, dx}) ? 8 : 4;
    (v == 8   ? LaunchBackward<WidePack<T>(), T>
     : v == 4 ? LaunchBackward<4, T>
              : LaunchBackward<1, T>)(*ctx_, num_, channels_, spatial_dim_, !use_global_stats_,
                                      !use_global_stats_ || param_grads, dy, y, from, mask, scale,
                                      std_dev, stats + 2 * channels_, stats + 3 * channels_,
                                      scale_grad, bias_grad, dx);
  });
}

}  // namespace cortado
