// SPDX-License-Identifier: Apache-2.0
// Mixed precision (math/gpu.hpp): float32 tensors copied into float16 or bfloat16 operands,
// NCHW to NHWC for cuDNN's tensor-core convolutions, and back; and matrix products on
// float16/bfloat16 operands with float32 sums and results.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/cuda.hpp"
#include "math/gpu.hpp"
#include "math/half_convert.hpp"

namespace cortado::math::gpu {
namespace {

template <typename H>
__device__ H Narrow(float v);
template <>
__device__ __half Narrow<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __nv_bfloat16 Narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
__device__ float Widen(__half v) { return __half2float(v); }
__device__ float Widen(__nv_bfloat16 v) { return __bfloat162float(v); }
// The copies into NHWC read float32, or 16-bit values of their own type (half tensors, which
// they move exactly).
__device__ float Widen(float v) { return v; }

// Two adjacent channels of an NHWC copy as one 4-byte value, the lower channel in the low half
// (the lower address).
template <typename H>
struct Pair;
template <>
struct Pair<__half> {
  using Type = __half2;
  __device__ static Type Make(float lo, float hi) { return __floats2half2_rn(lo, hi); }
  // (a.low, b.low) and (a.high, b.high): exact moves, no rounding.
  __device__ static Type Lows(Type a, Type b) { return __lows2half2(a, b); }
  __device__ static Type Highs(Type a, Type b) { return __highs2half2(a, b); }
};
template <>
struct Pair<__nv_bfloat16> {
  using Type = __nv_bfloat162;
  __device__ static Type Make(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
  __device__ static Type Lows(Type a, Type b) { return __lows2bfloat162(a, b); }
  __device__ static Type Highs(Type a, Type b) { return __highs2bfloat162(a, b); }
};

// The general copies (odd channel counts above kFewChannels, or a half pointer off a 4-byte
// boundary): one 32 x 32 tile of a [c, hw] plane per block, through shared memory so that both
// the reads and the writes are coalesced; the grid's z dimension walks the images.
constexpr int kTile = 32;
constexpr int kRows = 8;

template <typename H, typename S = float>
__global__ void ToNhwcKernel(int n, int c, int hw, const S* __restrict__ src, H* __restrict__ dst) {
  __shared__ float tile[kTile][kTile + 1];
  const int c0 = blockIdx.y * kTile, p0 = blockIdx.x * kTile;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const S* in = src + img * c * static_cast<int64_t>(hw);
    H* out = dst + img * c * static_cast<int64_t>(hw);
    for (int i = threadIdx.y; i < kTile; i += kRows) {
      const int ch = c0 + i, p = p0 + threadIdx.x;
      if (ch < c && p < hw) tile[i][threadIdx.x] = Widen(in[static_cast<int64_t>(ch) * hw + p]);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRows) {
      const int p = p0 + i, ch = c0 + threadIdx.x;
      if (p < hw && ch < c) out[static_cast<int64_t>(p) * c + ch] = Narrow<H>(tile[threadIdx.x][i]);
    }
    __syncthreads();
  }
}

template <typename H>
__global__ void FromNhwcKernel(int n, int c, int hw, const H* __restrict__ src, float beta,
                               float* __restrict__ dst) {
  __shared__ float tile[kTile][kTile + 1];
  const int c0 = blockIdx.y * kTile, p0 = blockIdx.x * kTile;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const H* in = src + img * c * static_cast<int64_t>(hw);
    float* out = dst + img * c * static_cast<int64_t>(hw);
    for (int i = threadIdx.y; i < kTile; i += kRows) {
      const int p = p0 + i, ch = c0 + threadIdx.x;
      if (p < hw && ch < c) tile[threadIdx.x][i] = Widen(in[static_cast<int64_t>(p) * c + ch]);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRows) {
      const int ch = c0 + i, p = p0 + threadIdx.x;
      if (ch < c && p < hw) {
        float* o = out + static_cast<int64_t>(ch) * hw + p;
        *o = beta == 0.0f ? tile[i][threadIdx.x] : tile[i][threadIdx.x] + beta * *o;
      }
    }
    __syncthreads();
  }
}

// Even channel counts above kFewChannels (every convolution but the first): a block of
// kPairs x kRows threads moves a tile of 2 * kPairs = 64 channels x 32 * kCols positions. On
// the NHWC side each thread moves a pair of channels as one 4-byte value, so a warp covers the
// tile's 64 channels of one position: 128 contiguous bytes. On the NCHW side a warp covers 32
// consecutive positions of one channel, 128 bytes. Shared memory holds the pairs already
// rounded, one 4-byte word each, [pair][position]: the NCHW side walks its rows and the NHWC
// side its columns, conflict-free with the odd row length. Each thread issues all its global
// reads before its first write so that many are in flight. A pair is whole or absent at the
// tile's edge: c is even, so channel ch < c (ch even) has ch + 1 < c too.
constexpr int kPairs = 32;

// The second half of the NCHW-to-NHWC pair kernels below: a barrier, then the block's tile
// ([pair][position]) out as channels c0 + 2x and c0 + 2x + 1 at positions p0 + y + kRows * k of
// one image's NHWC values (a pair as one 4-byte value, a warp 128 contiguous bytes), then a
// barrier before the tile is filled again.
template <typename H, int kPositions>
__device__ __forceinline__ void StorePairsTile(
    const typename Pair<H>::Type (&tile)[kPairs][kPositions + 1], int c, int hw, int c0, int p0,
    typename Pair<H>::Type* __restrict__ out) {
  constexpr int kSteps = kPositions / kRows;
  const int x = threadIdx.x, y = threadIdx.y;
  __syncthreads();
  if (c0 + 2 * x < c) {
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const int q = y + kRows * k;
      if (p0 + q < hw) out[static_cast<int64_t>(p0 + q) * (c / 2) + c0 / 2 + x] = tile[x][q];
    }
  }
  __syncthreads();
}

template <typename H, int kCols, typename S = float>
__global__ void __launch_bounds__(kPairs* kRows)
    ToNhwcPairsKernel(int n, int c, int hw, const S* __restrict__ src, H* __restrict__ dst) {
  using H2 = typename Pair<H>::Type;
  constexpr int kPositions = 32 * kCols, kPairRows = kPairs / kRows;
  __shared__ H2 tile[kPairs][kPositions + 1];
  const int x = threadIdx.x, y = threadIdx.y;
  const int c0 = blockIdx.y * 2 * kPairs, p0 = blockIdx.x * kPositions;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const S* in = src + img * c * static_cast<int64_t>(hw);
    // c is even and dst 4-byte aligned, so every pair's first channel is too.
    H2* out = reinterpret_cast<H2*>(dst + img * c * static_cast<int64_t>(hw));
    // Channels c0 + 2r and c0 + 2r + 1 at positions p0 + x + 32j, r = y + kRows * i.
    float lo[kPairRows][kCols] = {}, hi[kPairRows][kCols] = {};
#pragma unroll
    for (int i = 0; i < kPairRows; ++i) {
      const int ch = c0 + 2 * (y + kRows * i);
      if (ch >= c) continue;
      const S* row = in + static_cast<int64_t>(ch) * hw + p0 + x;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if (p0 + x + 32 * j < hw) {
          lo[i][j] = Widen(row[32 * j]);
          hi[i][j] = Widen(row[hw + 32 * j]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kPairRows; ++i) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if (c0 + 2 * (y + kRows * i) < c && p0 + x + 32 * j < hw) {
          tile[y + kRows * i][x + 32 * j] = Pair<H>::Make(lo[i][j], hi[i][j]);
        }
      }
    }
    StorePairsTile<H, kPositions>(tile, c, hw, c0, p0, out);
  }
}

// The first half of the NHWC-to-NCHW pair kernels below: channels c0 + 2x and c0 + 2x + 1 at
// positions p0 + y + kRows * k of one image's NHWC values into the block's tile (pairs of
// channels read as one 4-byte value, a warp 128 contiguous bytes), then a barrier.
template <typename H, int kPositions>
__device__ __forceinline__ void LoadPairsTile(
    const typename Pair<H>::Type* __restrict__ in, int c, int hw, int c0, int p0,
    typename Pair<H>::Type (&tile)[kPairs][kPositions + 1]) {
  using H2 = typename Pair<H>::Type;
  constexpr int kSteps = kPositions / kRows;
  const int x = threadIdx.x, y = threadIdx.y;
  if (c0 + 2 * x < c) {
    H2 v[kSteps];
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const int q = y + kRows * k;
      if (p0 + q < hw) v[k] = in[static_cast<int64_t>(p0 + q) * (c / 2) + c0 / 2 + x];
    }
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const int q = y + kRows * k;
      if (p0 + q < hw) tile[x][q] = v[k];
    }
  }
  __syncthreads();
}

// kAdd: dst = value + beta * dst; else dst = value, dst not read (it may hold anything, NaN).
// Apart, so that the overwriting copy keeps fewer registers and more blocks in flight.
template <typename H, int kCols, bool kAdd>
__global__ void __launch_bounds__(kPairs* kRows)
    FromNhwcPairsKernel(int n, int c, int hw, const H* __restrict__ src, float beta,
                        float* __restrict__ dst) {
  using H2 = typename Pair<H>::Type;
  constexpr int kPositions = 32 * kCols, kPairRows = kPairs / kRows;
  __shared__ H2 tile[kPairs][kPositions + 1];
  const int x = threadIdx.x, y = threadIdx.y;
  const int c0 = blockIdx.y * 2 * kPairs, p0 = blockIdx.x * kPositions;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const H2* in = reinterpret_cast<const H2*>(src + img * c * static_cast<int64_t>(hw));
    float* out = dst + img * c * static_cast<int64_t>(hw);
    LoadPairsTile<H, kPositions>(in, c, hw, c0, p0, tile);
    // Channels c0 + 2r and c0 + 2r + 1 at positions p0 + x + 32j, r = y + kRows * i.
    if constexpr (!kAdd) {
#pragma unroll
      for (int i = 0; i < kPairRows; ++i) {
        const int ch = c0 + 2 * (y + kRows * i);
        if (ch >= c) continue;
        float* row = out + static_cast<int64_t>(ch) * hw + p0 + x;
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          if (p0 + x + 32 * j < hw) {
            const H2 w = tile[y + kRows * i][x + 32 * j];
            row[32 * j] = __low2float(w);
            row[hw + 32 * j] = __high2float(w);
          }
        }
      }
    } else {
      float lo[kPairRows][kCols] = {}, hi[kPairRows][kCols] = {};
#pragma unroll
      for (int i = 0; i < kPairRows; ++i) {
        const int ch = c0 + 2 * (y + kRows * i);
        if (ch >= c) continue;
        const float* row = out + static_cast<int64_t>(ch) * hw + p0 + x;
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          if (p0 + x + 32 * j < hw) {
            lo[i][j] = row[32 * j];
            hi[i][j] = row[hw + 32 * j];
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kPairRows; ++i) {
        const int ch = c0 + 2 * (y + kRows * i);
        if (ch >= c) continue;
        float* row = out + static_cast<int64_t>(ch) * hw + p0 + x;
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          if (p0 + x + 32 * j < hw) {
            const H2 w = tile[y + kRows * i][x + 32 * j];
            row[32 * j] = __low2float(w) + beta * lo[i][j];
            row[hw + 32 * j] = __high2float(w) + beta * hi[i][j];
          }
        }
      }
    }
    __syncthreads();
  }
}

// Few channels (the first convolution's 3): a block of kFewThreads threads moves
// kFewPositions positions with all their channels, whose NHWC copy is one contiguous span.
// The NCHW side reads or writes one channel's positions at a time, a warp 32 consecutive
// floats; the NHWC side copies the span whole, in pairs where both ends are 4-byte aligned.
// Shared memory holds the span, [position][channel].
constexpr int kFewChannels = 16;
constexpr int kFewThreads = 256;
constexpr int kFewPerThread = 4;
constexpr int kFewPositions = kFewThreads * kFewPerThread;

template <typename H>
size_t FewBytes(int c) {
  return static_cast<size_t>(kFewPositions) * c * sizeof(H);
}

// count values from `from` to `to` by the whole block.
template <typename H>
__device__ void CopySpan(const H* from, H* to, int count) {
  using H2 = typename Pair<H>::Type;
  if (reinterpret_cast<uintptr_t>(from) % sizeof(H2) == 0 &&
      reinterpret_cast<uintptr_t>(to) % sizeof(H2) == 0) {
    const H2* from2 = reinterpret_cast<const H2*>(from);
    H2* to2 = reinterpret_cast<H2*>(to);
    for (int i = threadIdx.x; i < count / 2; i += blockDim.x) to2[i] = from2[i];
    if (count % 2 == 1 && threadIdx.x == 0) to[count - 1] = from[count - 1];
  } else {
    for (int i = threadIdx.x; i < count; i += blockDim.x) to[i] = from[i];
  }
}

template <typename H, typename S = float>
__global__ void __launch_bounds__(kFewThreads)
    ToNhwcFewKernel(int n, int c, int hw, const S* __restrict__ src, H* __restrict__ dst) {
  extern __shared__ __align__(16) unsigned char few_tile[];
  H* tile = reinterpret_cast<H*>(few_tile);
  const int p0 = blockIdx.x * kFewPositions, count = min(kFewPositions, hw - p0);
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const int64_t base = img * c * static_cast<int64_t>(hw);
    for (int ch = 0; ch < c; ++ch) {
      const S* row = src + base + static_cast<int64_t>(ch) * hw + p0;
      float v[kFewPerThread] = {};
#pragma unroll
      for (int j = 0; j < kFewPerThread; ++j) {
        const int p = threadIdx.x + kFewThreads * j;
        if (p < count) v[j] = Widen(row[p]);
      }
#pragma unroll
      for (int j = 0; j < kFewPerThread; ++j) {
        const int p = threadIdx.x + kFewThreads * j;
        if (p < count) tile[p * c + ch] = Narrow<H>(v[j]);
      }
    }
    __syncthreads();
    CopySpan<H>(tile, dst + base + static_cast<int64_t>(p0) * c, count * c);
    __syncthreads();
  }
}

template <typename H>
__global__ void __launch_bounds__(kFewThreads)
    FromNhwcFewKernel(int n, int c, int hw, const H* __restrict__ src, float beta,
                      float* __restrict__ dst) {
  extern __shared__ __align__(16) unsigned char few_tile[];
  H* tile = reinterpret_cast<H*>(few_tile);
  const int p0 = blockIdx.x * kFewPositions, count = min(kFewPositions, hw - p0);
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const int64_t base = img * c * static_cast<int64_t>(hw);
    CopySpan<H>(src + base + static_cast<int64_t>(p0) * c, tile, count * c);
    __syncthreads();
    for (int ch = 0; ch < c; ++ch) {
      float* row = dst + base + static_cast<int64_t>(ch) * hw + p0;
      // dst is read only where beta is not 0: it may hold anything (NaN) otherwise.
      float old[kFewPerThread] = {};
      if (beta != 0.0f) {
#pragma unroll
        for (int j = 0; j < kFewPerThread; ++j) {
          const int p = threadIdx.x + kFewThreads * j;
          if (p < count) old[j] = row[p];
        }
      }
#pragma unroll
      for (int j = 0; j < kFewPerThread; ++j) {
        const int p = threadIdx.x + kFewThreads * j;
        if (p < count) {
          const float v = Widen(tile[p * c + ch]);
          row[p] = beta == 0.0f ? v : v + beta * old[j];
        }
      }
    }
    __syncthreads();
  }
}

template <typename H>
__global__ void NarrowKernel(int64_t count, const float* __restrict__ src, H* __restrict__ dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = Narrow<H>(src[i]);
  }
}

template <typename H>
__global__ void WidenKernel(int64_t count, const H* __restrict__ src, float beta,
                            float* __restrict__ dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = Widen(src[i]);
    dst[i] = beta == 0.0f ? v : v + beta * dst[i];
  }
}

constexpr int kFlatThreads = 256;
int FlatBlocks(int64_t count) {
  return static_cast<int>(std::min<int64_t>((count + kFlatThreads - 1) / kFlatThreads, 4096));
}

dim3 TransposeGrid(int n, int c, int hw) {
  return dim3((hw + kTile - 1) / kTile, (c + kTile - 1) / kTile, std::min(n, 65535));
}
dim3 PairsGrid(int n, int c, int hw, int positions) {
  return dim3((hw + positions - 1) / positions, (c + 2 * kPairs - 1) / (2 * kPairs),
              std::min(n, 65535));
}
dim3 FewGrid(int n, int hw) {
  return dim3((hw + kFewPositions - 1) / kFewPositions, 1, std::min(n, 65535));
}

// Which copy fits the shape: with one channel or one position NCHW and NHWC are the same
// layout; then the few-channel, pair and general tiles.
template <typename H>
void ToNhwc(cudaStream_t stream, int n, int c, int hw, const float* src, H* dst) {
  if (c == 1 || hw == 1) {
    const int64_t count = static_cast<int64_t>(n) * c * hw;
    NarrowKernel<<<FlatBlocks(count), kFlatThreads, 0, stream>>>(count, src, dst);
  } else if (c <= kFewChannels) {
    ToNhwcFewKernel<<<FewGrid(n, hw), kFewThreads, FewBytes<H>(c), stream>>>(n, c, hw, src, dst);
  } else if (c % 2 == 0 && reinterpret_cast<uintptr_t>(dst) % sizeof(typename Pair<H>::Type) == 0) {
    const dim3 block(kPairs, kRows);
    if (hw <= 32) {
      ToNhwcPairsKernel<H, 1><<<PairsGrid(n, c, hw, 32), block, 0, stream>>>(n, c, hw, src, dst);
    } else {
      ToNhwcPairsKernel<H, 2><<<PairsGrid(n, c, hw, 64), block, 0, stream>>>(n, c, hw, src, dst);
    }
  } else {
    ToNhwcKernel<<<TransposeGrid(n, c, hw), dim3(kTile, kRows), 0, stream>>>(n, c, hw, src, dst);
  }
}

template <typename H, int kCols>
void FromPairs(cudaStream_t stream, int n, int c, int hw, const H* src, float beta, float* dst) {
  const dim3 grid = PairsGrid(n, c, hw, 32 * kCols), block(kPairs, kRows);
  if (beta == 0.0f) {
    FromNhwcPairsKernel<H, kCols, false><<<grid, block, 0, stream>>>(n, c, hw, src, beta, dst);
  } else {
    FromNhwcPairsKernel<H, kCols, true><<<grid, block, 0, stream>>>(n, c, hw, src, beta, dst);
  }
}

template <typename H>
void FromNhwc(cudaStream_t stream, int n, int c, int hw, const H* src, float beta, float* dst) {
  if (c == 1 || hw == 1) {
    const int64_t count = static_cast<int64_t>(n) * c * hw;
    WidenKernel<<<FlatBlocks(count), kFlatThreads, 0, stream>>>(count, src, beta, dst);
  } else if (c <= kFewChannels) {
    FromNhwcFewKernel<<<FewGrid(n, hw), kFewThreads, FewBytes<H>(c), stream>>>(n, c, hw, src, beta,
                                                                               dst);
  } else if (c % 2 == 0 && reinterpret_cast<uintptr_t>(src) % sizeof(typename Pair<H>::Type) == 0) {
    if (hw <= 32) {
      FromPairs<H, 1>(stream, n, c, hw, src, beta, dst);
    } else {
      FromPairs<H, 2>(stream, n, c, hw, src, beta, dst);
    }
  } else {
    FromNhwcKernel<<<TransposeGrid(n, c, hw), dim3(kTile, kRows), 0, stream>>>(n, c, hw, src, beta,
                                                                               dst);
  }
}

}  // namespace

void ToHalfNhwc(Context& ctx, Context::HalfType type, int n, int c, int hw, const float* src,
                void* dst) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  cudaStream_t stream = ::cortado::cuda::Stream(ctx);
  if (type == Context::HalfType::kBFloat16) {
    ToNhwc(stream, n, c, hw, src, static_cast<__nv_bfloat16*>(dst));
  } else {
    ToNhwc(stream, n, c, hw, src, static_cast<__half*>(dst));
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void FromHalfNhwc(Context& ctx, Context::HalfType type, int n, int c, int hw, const void* src,
                  float beta, float* dst) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  cudaStream_t stream = ::cortado::cuda::Stream(ctx);
  if (type == Context::HalfType::kBFloat16) {
    FromNhwc(stream, n, c, hw, static_cast<const __nv_bfloat16*>(src), beta, dst);
  } else {
    FromNhwc(stream, n, c, hw, static_cast<const __half*>(src), beta, dst);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void ToHalf(Context& ctx, Context::HalfType type, int64_t count, const float* src, void* dst) {
  if (count == 0) return;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((count + kThreads - 1) / kThreads, 4096));
  cudaStream_t stream = ::cortado::cuda::Stream(ctx);
  if (type == Context::HalfType::kBFloat16) {
    NarrowKernel<<<blocks, kThreads, 0, stream>>>(count, src, static_cast<__nv_bfloat16*>(dst));
  } else {
    NarrowKernel<<<blocks, kThreads, 0, stream>>>(count, src, static_cast<__half*>(dst));
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void GemmHalfOperands(Context& ctx, Context::HalfType type, bool trans_a, bool trans_b, int m,
                      int n, int k, float alpha, const void* a, const void* b, float beta, void* c,
                      bool c_in_type) {
  if (m == 0 || n == 0) return;
#if CORTADO_WITH_CUBLAS
  CORTADO_CHECK(type != Context::HalfType::kNone, "GemmHalfOperands needs a 16-bit type");
  const cudaDataType_t t = type == Context::HalfType::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  CORTADO_CUBLAS_CHECK(
      cublasGemmEx(::cortado::cuda::Get(ctx).cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                   trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, t, std::max(ldb, 1), a,
                   t, std::max(lda, 1), &beta, c, c_in_type ? t : CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT));
#else
  (void)ctx, (void)type, (void)trans_a, (void)trans_b, (void)k, (void)alpha, (void)a, (void)b;
  (void)beta, (void)c, (void)c_in_type;
  CORTADO_THROW(kUnimplemented, "16-bit GEMM operands need a build with cuBLAS");
#endif
}

void GemmMixed(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
               const float* a, const float* b, float beta, float* c) {
  const Context::HalfType type = ctx.half_compute();
#if CORTADO_WITH_CUBLAS
  if (type != Context::HalfType::kNone && m > 0 && n > 0 && k > 0) {
    const int64_t a_count = static_cast<int64_t>(m) * k, b_count = static_cast<int64_t>(k) * n;
    // Each operand's copy starts on a 256-byte boundary.
    const int64_t a_bytes = (a_count * 2 + 255) / 256 * 256;
    char* scratch = static_cast<char*>(
        ::cortado::cuda::Get(ctx).HalfScratch(static_cast<size_t>(a_bytes + b_count * 2)));
    void* ah = scratch;
    void* bh = scratch + a_bytes;
    ToHalf(ctx, type, a_count, a, ah);
    ToHalf(ctx, type, b_count, b, bh);
    GemmHalfOperands(ctx, type, trans_a, trans_b, m, n, k, alpha, ah, bh, beta, c, false);
    return;
  }
#endif
  Gemm(ctx, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
}

}  // namespace cortado::math::gpu

namespace cortado::math {
namespace {
int FlatConvertBlocks(int64_t count) {
  return static_cast<int>(std::min<int64_t>((count + 255) / 256, 4096));
}
}  // namespace

void FloatsToHalfGpu(void* stream, HalfType type, int64_t count, const float* src, void* dst) {
  if (count == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    gpu::NarrowKernel<<<FlatConvertBlocks(count), 256, 0, s>>>(count, src,
                                                               static_cast<__nv_bfloat16*>(dst));
  } else {
    gpu::NarrowKernel<<<FlatConvertBlocks(count), 256, 0, s>>>(count, src,
                                                               static_cast<__half*>(dst));
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void FloatsToHalfNhwcGpu(void* stream, HalfType type, int n, int c, int hw, const float* src,
                         void* dst) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    gpu::ToNhwc(s, n, c, hw, src, static_cast<__nv_bfloat16*>(dst));
  } else {
    gpu::ToNhwc(s, n, c, hw, src, static_cast<__half*>(dst));
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void HalfNhwcToFloatsGpu(void* stream, HalfType type, int n, int c, int hw, const void* src,
                         float* dst) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    gpu::FromNhwc(s, n, c, hw, static_cast<const __nv_bfloat16*>(src), 0.0f, dst);
  } else {
    gpu::FromNhwc(s, n, c, hw, static_cast<const __half*>(src), 0.0f, dst);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void HalfToFloatsGpu(void* stream, HalfType type, int64_t count, const void* src, float* dst) {
  if (count == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    gpu::WidenKernel<<<FlatConvertBlocks(count), 256, 0, s>>>(
        count, static_cast<const __nv_bfloat16*>(src), 0.0f, dst);
  } else {
    gpu::WidenKernel<<<FlatConvertBlocks(count), 256, 0, s>>>(
        count, static_cast<const __half*>(src), 0.0f, dst);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado::math

// Half tensors (gpu.hpp): a convolution's 16-bit NCHW tensors into cuDNN's NHWC operands and
// back, and its bias on 16-bit outputs. Into NHWC these are the copies above reading 16-bit
// values, which they move exactly; back into NCHW the copies below write 16-bit values, exactly,
// or with a bias added on the way (one rounding more after cuDNN's).
namespace cortado::math::gpu {
namespace {

// v plus bias[ch], or v itself (its sign of zero too) without a bias.
__device__ __forceinline__ float PlusBias(float v, const float* bias, int ch) {
  return bias != nullptr ? v + bias[ch] : v;
}

template <typename H>
__global__ void HalfFromNhwcKernel(int n, int c, int hw, const H* __restrict__ src,
                                   const float* __restrict__ bias, H* __restrict__ dst) {
  __shared__ float tile[kTile][kTile + 1];
  const int c0 = blockIdx.y * kTile, p0 = blockIdx.x * kTile;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const H* in = src + img * c * static_cast<int64_t>(hw);
    H* out = dst + img * c * static_cast<int64_t>(hw);
    for (int i = threadIdx.y; i < kTile; i += kRows) {
      const int p = p0 + i, ch = c0 + threadIdx.x;
      if (p < hw && ch < c) tile[threadIdx.x][i] = Widen(in[static_cast<int64_t>(p) * c + ch]);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRows) {
      const int ch = c0 + i, p = p0 + threadIdx.x;
      if (ch < c && p < hw) {
        out[static_cast<int64_t>(ch) * hw + p] =
            Narrow<H>(PlusBias(tile[i][threadIdx.x], bias, ch));
      }
    }
    __syncthreads();
  }
}

// FromNhwcPairsKernel's tiles with a 16-bit destination: the NHWC side reads pairs of channels
// as one 4-byte value (a warp 128 contiguous bytes), the NCHW side writes 32 consecutive values
// of one channel per warp.
template <typename H, int kCols>
__global__ void __launch_bounds__(kPairs* kRows)
    HalfFromNhwcPairsKernel(int n, int c, int hw, const H* __restrict__ src,
                            const float* __restrict__ bias, H* __restrict__ dst) {
  using H2 = typename Pair<H>::Type;
  constexpr int kPositions = 32 * kCols, kPairRows = kPairs / kRows;
  __shared__ H2 tile[kPairs][kPositions + 1];
  const int x = threadIdx.x, y = threadIdx.y;
  const int c0 = blockIdx.y * 2 * kPairs, p0 = blockIdx.x * kPositions;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const H2* in = reinterpret_cast<const H2*>(src + img * c * static_cast<int64_t>(hw));
    H* out = dst + img * c * static_cast<int64_t>(hw);
    LoadPairsTile<H, kPositions>(in, c, hw, c0, p0, tile);
    // Channels c0 + 2r and c0 + 2r + 1 at positions p0 + x + 32j, r = y + kRows * i.
#pragma unroll
    for (int i = 0; i < kPairRows; ++i) {
      const int ch = c0 + 2 * (y + kRows * i);
      if (ch >= c) continue;
      H* row = out + static_cast<int64_t>(ch) * hw + p0 + x;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if (p0 + x + 32 * j < hw) {
          const H2 w = tile[y + kRows * i][x + 32 * j];
          row[32 * j] = Narrow<H>(PlusBias(__low2float(w), bias, ch));
          row[hw + 32 * j] = Narrow<H>(PlusBias(__high2float(w), bias, ch + 1));
        }
      }
    }
    __syncthreads();
  }
}

// The pair tiles between two 16-bit layouts when hw is even, so that every NCHW row starts on a
// 4-byte boundary: the NCHW side moves two positions of a channel as one 4-byte value too (a
// warp 128 contiguous bytes, where 2-byte values gave 64), and each thread turns the two
// positions of channels ch and ch + 1 into the two positions' channel pairs in registers (exact
// moves). A block moves 64 channels x 64 * kCols positions (kCols 2 spills at 64 registers); the
// tile is as in the kernels above, [pair][position]. hw even and p0 even: a position pair is whole
// or absent at the tile's edge. Only the NCHW-to-NHWC direction: the same trick on the way back
// (two positions per 4-byte NCHW store) measured 3-10% slower than HalfFromNhwcPairsKernel on
// 4 of ResNet-50's 5 stage shapes (bench/RESULTS.md, 2026-11-27), so that one stays.
constexpr int kWideBlocks = 4;  // blocks per multiprocessor: at most 64 registers a thread

template <typename H, int kCols>
__global__ void __launch_bounds__(kPairs* kRows, kWideBlocks)
    HalfToNhwcWideKernel(int n, int c, int hw, const H* __restrict__ src, H* __restrict__ dst) {
  using H2 = typename Pair<H>::Type;
  constexpr int kPositions = 64 * kCols, kPairRows = kPairs / kRows;
  __shared__ H2 tile[kPairs][kPositions + 1];
  const int x = threadIdx.x, y = threadIdx.y;
  const int c0 = blockIdx.y * 2 * kPairs, p0 = blockIdx.x * kPositions;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const int64_t base = img * c * static_cast<int64_t>(hw);  // even: hw is
    const H2* in = reinterpret_cast<const H2*>(src + base);
    H2* out = reinterpret_cast<H2*>(dst + base);
    // Channels ch = c0 + 2r and ch + 1, r = y + kRows * i, at positions p and p + 1,
    // p = p0 + 2x + 64j: lo holds channel ch's two, hi channel ch + 1's.
    H2 lo[kPairRows][kCols], hi[kPairRows][kCols];
#pragma unroll
    for (int i = 0; i < kPairRows; ++i) {
      const int ch = c0 + 2 * (y + kRows * i);
      if (ch >= c) continue;
      const H2* row = in + (static_cast<int64_t>(ch) * hw + p0) / 2 + x;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if (p0 + 2 * x + 64 * j < hw) {
          lo[i][j] = row[32 * j];
          hi[i][j] = row[hw / 2 + 32 * j];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kPairRows; ++i) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if (c0 + 2 * (y + kRows * i) < c && p0 + 2 * x + 64 * j < hw) {
          tile[y + kRows * i][2 * x + 64 * j] = Pair<H>::Lows(lo[i][j], hi[i][j]);
          tile[y + kRows * i][2 * x + 1 + 64 * j] = Pair<H>::Highs(lo[i][j], hi[i][j]);
        }
      }
    }
    StorePairsTile<H, kPositions>(tile, c, hw, c0, p0, out);
  }
}

template <typename H>
__global__ void __launch_bounds__(kFewThreads)
    HalfFromNhwcFewKernel(int n, int c, int hw, const H* __restrict__ src,
                          const float* __restrict__ bias, H* __restrict__ dst) {
  extern __shared__ __align__(16) unsigned char few_tile[];
  H* tile = reinterpret_cast<H*>(few_tile);
  const int p0 = blockIdx.x * kFewPositions, count = min(kFewPositions, hw - p0);
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const int64_t base = img * c * static_cast<int64_t>(hw);
    CopySpan<H>(src + base + static_cast<int64_t>(p0) * c, tile, count * c);
    __syncthreads();
    for (int ch = 0; ch < c; ++ch) {
      H* row = dst + base + static_cast<int64_t>(ch) * hw + p0;
#pragma unroll
      for (int j = 0; j < kFewPerThread; ++j) {
        const int p = threadIdx.x + kFewThreads * j;
        if (p < count) row[p] = Narrow<H>(PlusBias(Widen(tile[p * c + ch]), bias, ch));
      }
    }
    __syncthreads();
  }
}

// One channel or one position, where NCHW and NHWC are the same layout: dst = src + bias of the
// element's channel (element i's is i % c with one position, 0 with one channel).
template <typename H>
__global__ void FlatBiasKernel(int64_t count, int c, bool one_position, const H* __restrict__ src,
                               const float* __restrict__ bias, H* __restrict__ dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = Narrow<H>(Widen(src[i]) + bias[one_position ? static_cast<int>(i % c) : 0]);
  }
}

// x[plane, :] += bias[plane % c] over [planes, hw]: the grid's y dimension walks the planes, so
// that no thread divides by hw.
template <typename H>
__global__ void AddChannelBiasKernel(int64_t planes, int c, int hw, const float* __restrict__ bias,
                                     H* __restrict__ x) {
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const float b = bias[plane % c];
    H* row = x + plane * hw;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < hw; p += gridDim.x * blockDim.x) {
      row[p] = Narrow<H>(Widen(row[p]) + b);
    }
  }
}

// Block (ch, g) sums channel ch of images g, g + groups, ... in a fixed order (each thread its
// own elements, then a fixed tree): into sums[ch] directly with one group, else into
// partial[ch * groups + g] for SumGroups.
constexpr int kSumThreads = 256;

template <typename H>
__global__ void __launch_bounds__(kSumThreads)
    SumChannelsKernel(int n, int c, int hw, int groups, const H* __restrict__ x,
                      float* __restrict__ partial, float* __restrict__ sums) {
  __shared__ float part[kSumThreads];
  const int ch = blockIdx.x, g = blockIdx.y;
  const int images = (n - g + groups - 1) / groups;
  const int per_block = images * hw;  // at most the tensor's count, an int
  float sum = 0.0f;
  for (int j = threadIdx.x; j < per_block; j += kSumThreads) {
    const int k = j / hw;
    const int64_t img = g + static_cast<int64_t>(k) * groups;
    sum += Widen(x[(img * c + ch) * hw + (j - k * hw)]);
  }
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  if (groups == 1) {
    sums[ch] += part[0];
  } else {
    partial[ch * groups + g] = part[0];
  }
}

__global__ void SumGroups(int c, int groups, const float* __restrict__ partial,
                          float* __restrict__ sums) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  float sum = 0.0f;
  for (int g = 0; g < groups; ++g) sum += partial[ch * groups + g];
  sums[ch] += sum;
}

// Channels-last [rows][c]: x[r][ch] += bias[ch].
template <typename H>
__global__ void AddRowBiasKernel(int64_t rows, int c, const float* __restrict__ bias,
                                 H* __restrict__ x) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    H* row = x + r * c;
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x)
      row[ch] = Narrow<H>(Widen(row[ch]) + bias[ch]);
  }
}

// Channels-last [rows][c]: partial[g][ch] = the sum of x[r][ch] over group g's rows, in order.
template <typename H>
__global__ void SumRowsKernel(int64_t rows, int c, int64_t rows_per_group, const H* __restrict__ x,
                              float* __restrict__ partial) {
  const int64_t begin = blockIdx.x * rows_per_group;
  const int64_t end = min(begin + rows_per_group, rows);
  for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
    // Four running sums (four loads in flight), added in a fixed order.
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t r = begin;
    for (; r + 3 < end; r += 4) {
#pragma unroll
      for (int k = 0; k < 4; ++k) sum[k] += Widen(x[(r + k) * c + ch]);
    }
    for (; r < end; ++r) sum[0] += Widen(x[r * c + ch]);
    partial[static_cast<int64_t>(blockIdx.x) * c + ch] = (sum[0] + sum[1]) + (sum[2] + sum[3]);
  }
}

__global__ void SumRowGroups(int c, int groups, const float* __restrict__ partial,
                             float* __restrict__ sums) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  float sum = 0.0f;
  for (int g = 0; g < groups; ++g) sum += partial[static_cast<int64_t>(g) * c + ch];
  sums[ch] += sum;
}

bool Aligned4(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; }

// The wide copies from NCHW to NHWC between 16-bit layouts (HalfToNhwcWideKernel);
// CORTADO_HALF_WIDE_COPIES=0 takes the pair tiles instead, for comparison.
bool WideCopies() {
  const char* v = std::getenv("CORTADO_HALF_WIDE_COPIES");
  return v == nullptr || std::string(v) != "0";
}

template <typename H>
void HalfToNhwc(cudaStream_t stream, int n, int c, int hw, const H* src, H* dst) {
  if (c == 1 || hw == 1) {
    CORTADO_CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(H) * n * c * static_cast<size_t>(hw),
                                       cudaMemcpyDeviceToDevice, stream));
  } else if (c <= kFewChannels) {
    ToNhwcFewKernel<H, H>
        <<<FewGrid(n, hw), kFewThreads, FewBytes<H>(c), stream>>>(n, c, hw, src, dst);
  } else if (c % 2 == 0 && hw % 2 == 0 && Aligned4(src) && Aligned4(dst) && WideCopies()) {
    const dim3 block(kPairs, kRows);
    HalfToNhwcWideKernel<H, 1><<<PairsGrid(n, c, hw, 64), block, 0, stream>>>(n, c, hw, src, dst);
  } else if (c % 2 == 0 && reinterpret_cast<uintptr_t>(dst) % sizeof(typename Pair<H>::Type) == 0) {
    const dim3 block(kPairs, kRows);
    if (hw <= 32) {
      ToNhwcPairsKernel<H, 1, H><<<PairsGrid(n, c, hw, 32), block, 0, stream>>>(n, c, hw, src, dst);
    } else {
      ToNhwcPairsKernel<H, 2, H><<<PairsGrid(n, c, hw, 64), block, 0, stream>>>(n, c, hw, src, dst);
    }
  } else {
    ToNhwcKernel<H, H>
        <<<TransposeGrid(n, c, hw), dim3(kTile, kRows), 0, stream>>>(n, c, hw, src, dst);
  }
}

template <typename H>
void HalfFromNhwc(cudaStream_t stream, int n, int c, int hw, const H* src, const float* bias,
                  H* dst) {
  if (c == 1 || hw == 1) {
    const int64_t count = static_cast<int64_t>(n) * c * hw;
    if (bias == nullptr) {
      CORTADO_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, sizeof(H) * count, cudaMemcpyDeviceToDevice, stream));
    } else {
      FlatBiasKernel<<<FlatBlocks(count), kFlatThreads, 0, stream>>>(count, c, hw == 1, src, bias,
                                                                     dst);
    }
  } else if (c <= kFewChannels) {
    HalfFromNhwcFewKernel<<<FewGrid(n, hw), kFewThreads, FewBytes<H>(c), stream>>>(n, c, hw, src,
                                                                                   bias, dst);
  } else if (c % 2 == 0 && reinterpret_cast<uintptr_t>(src) % sizeof(typename Pair<H>::Type) == 0) {
    const dim3 block(kPairs, kRows);
    if (hw <= 32) {
      HalfFromNhwcPairsKernel<H, 1>
          <<<PairsGrid(n, c, hw, 32), block, 0, stream>>>(n, c, hw, src, bias, dst);
    } else {
      HalfFromNhwcPairsKernel<H, 2>
          <<<PairsGrid(n, c, hw, 64), block, 0, stream>>>(n, c, hw, src, bias, dst);
    }
  } else {
    HalfFromNhwcKernel<<<TransposeGrid(n, c, hw), dim3(kTile, kRows), 0, stream>>>(n, c, hw, src,
                                                                                   bias, dst);
  }
}

}  // namespace

void HalfNchwToNhwc(Context& ctx, Context::HalfType type, int n, int c, int hw, const void* src,
                    void* dst) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  cudaStream_t stream = ::cortado::cuda::Stream(ctx);
  if (type == Context::HalfType::kBFloat16) {
    HalfToNhwc(stream, n, c, hw, static_cast<const __nv_bfloat16*>(src),
               static_cast<__nv_bfloat16*>(dst));
  } else {
    HalfToNhwc(stream, n, c, hw, static_cast<const __half*>(src), static_cast<__half*>(dst));
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void HalfNhwcToNchw(Context& ctx, Context::HalfType type, int n, int c, int hw, const void* src,
                    const float* bias, void* dst) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  cudaStream_t stream = ::cortado::cuda::Stream(ctx);
  if (type == Context::HalfType::kBFloat16) {
    HalfFromNhwc(stream, n, c, hw, static_cast<const __nv_bfloat16*>(src), bias,
                 static_cast<__nv_bfloat16*>(dst));
  } else {
    HalfFromNhwc(stream, n, c, hw, static_cast<const __half*>(src), bias,
                 static_cast<__half*>(dst));
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void AddChannelBiasHalf(Context& ctx, Context::HalfType type, int n, int c, int hw,
                        const float* bias, void* x) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  const int64_t planes = static_cast<int64_t>(n) * c;
  // Warps enough for a plane (small planes waste no threads), at most kFlatThreads.
  const int threads = std::min(kFlatThreads, (hw + 31) / 32 * 32);
  const dim3 grid(std::min((hw + threads - 1) / threads, 64),
                  static_cast<unsigned>(std::min<int64_t>(planes, 65535)));
  cudaStream_t stream = ::cortado::cuda::Stream(ctx);
  if (type == Context::HalfType::kBFloat16) {
    AddChannelBiasKernel<<<grid, threads, 0, stream>>>(planes, c, hw, bias,
                                                       static_cast<__nv_bfloat16*>(x));
  } else {
    AddChannelBiasKernel<<<grid, threads, 0, stream>>>(planes, c, hw, bias,
                                                       static_cast<__half*>(x));
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void AddChannelBiasHalfNhwc(Context& ctx, Context::HalfType type, int64_t rows, int c,
                            const float* bias, void* x) {
  if (rows * c == 0) return;
  const int threads = std::min(kFlatThreads, (c + 31) / 32 * 32);
  const int blocks = static_cast<int>(std::min<int64_t>(rows, 65535));
  cudaStream_t stream = ::cortado::cuda::Stream(ctx);
  if (type == Context::HalfType::kBFloat16) {
    AddRowBiasKernel<<<blocks, threads, 0, stream>>>(rows, c, bias, static_cast<__nv_bfloat16*>(x));
  } else {
    AddRowBiasKernel<<<blocks, threads, 0, stream>>>(rows, c, bias, static_cast<__half*>(x));
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void SumChannelsHalfNhwc(Context& ctx, Context::HalfType type, int64_t rows, int c, const void* x,
                         float* sums) {
  if (rows * c == 0) return;
  auto& res = ::cortado::cuda::Get(ctx);
  // About 64 rows per block, at most 4096 groups; the partials in the context's workspace.
  const int64_t rows_per_group = std::max<int64_t>(64, (rows + 4095) / 4096);
  const int groups = static_cast<int>((rows + rows_per_group - 1) / rows_per_group);
  auto* partial =
      static_cast<float*>(res.Workspace(sizeof(float) * groups * static_cast<size_t>(c)));
  const int threads = std::min(kFlatThreads, (c + 31) / 32 * 32);
  if (type == Context::HalfType::kBFloat16) {
    SumRowsKernel<<<groups, threads, 0, res.stream>>>(
        rows, c, rows_per_group, static_cast<const __nv_bfloat16*>(x), partial);
  } else {
    SumRowsKernel<<<groups, threads, 0, res.stream>>>(rows, c, rows_per_group,
                                                      static_cast<const __half*>(x), partial);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
  SumRowGroups<<<(c + 255) / 256, 256, 0, res.stream>>>(c, groups, partial, sums);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void SumChannelsHalf(Context& ctx, Context::HalfType type, int n, int c, int hw, const void* x,
                     float* sums) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  auto& res = ::cortado::cuda::Get(ctx);
  // One block per channel leaves most of the GPU idle when channels are few and images many:
  // each channel's images are split into groups (at most one partial sum per slot of the
  // reduce buffer, at least about 8192 values per block), whose sums are then added in order.
  constexpr int kSlots = ::cortado::cuda::Resources::kReduceSlots;
  const int64_t per_channel = static_cast<int64_t>(n) * hw;
  const int groups = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({n, kSlots / c, (per_channel + 8191) / 8192})));
  float* partial = groups > 1 ? res.ReduceBuffer() : nullptr;
  const dim3 grid(c, groups);
  if (type == Context::HalfType::kBFloat16) {
    SumChannelsKernel<<<grid, kSumThreads, 0, res.stream>>>(
        n, c, hw, groups, static_cast<const __nv_bfloat16*>(x), partial, sums);
  } else {
    SumChannelsKernel<<<grid, kSumThreads, 0, res.stream>>>(
        n, c, hw, groups, static_cast<const __half*>(x), partial, sums);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
  if (groups > 1) {
    SumGroups<<<(c + 255) / 256, 256, 0, res.stream>>>(c, groups, partial, sums);
    CORTADO_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cortado::math::gpu
