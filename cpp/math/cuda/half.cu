// SPDX-License-Identifier: Apache-2.0
// Mixed precision (math/gpu.hpp): float32 tensors copied into float16 or bfloat16 operands,
// NCHW to NHWC for cuDNN's tensor-core convolutions, and back; and matrix products on
// float16/bfloat16 operands with float32 sums and results.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda.hpp"
#include "math/gpu.hpp"

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

// Two adjacent channels of an NHWC copy as one 4-byte value, the lower channel in the low half
// (the lower address).
template <typename H>
struct Pair;
template <>
struct Pair<__half> {
  using Type = __half2;
  __device__ static Type Make(float lo, float hi) { return __floats2half2_rn(lo, hi); }
};
template <>
struct Pair<__nv_bfloat16> {
  using Type = __nv_bfloat162;
  __device__ static Type Make(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
};

// The general copies (odd channel counts above kFewChannels, or a half pointer off a 4-byte
// boundary): one 32 x 32 tile of a [c, hw] plane per block, through shared memory so that both
// the reads and the writes are coalesced; the grid's z dimension walks the images.
constexpr int kTile = 32;
constexpr int kRows = 8;

template <typename H>
__global__ void ToNhwcKernel(int n, int c, int hw, const float* __restrict__ src,
                             H* __restrict__ dst) {
  __shared__ float tile[kTile][kTile + 1];
  const int c0 = blockIdx.y * kTile, p0 = blockIdx.x * kTile;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const float* in = src + img * c * static_cast<int64_t>(hw);
    H* out = dst + img * c * static_cast<int64_t>(hw);
    for (int i = threadIdx.y; i < kTile; i += kRows) {
      const int ch = c0 + i, p = p0 + threadIdx.x;
      if (ch < c && p < hw) tile[i][threadIdx.x] = in[static_cast<int64_t>(ch) * hw + p];
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

template <typename H, int kCols>
__global__ void __launch_bounds__(kPairs* kRows)
    ToNhwcPairsKernel(int n, int c, int hw, const float* __restrict__ src, H* __restrict__ dst) {
  using H2 = typename Pair<H>::Type;
  constexpr int kPositions = 32 * kCols, kPairRows = kPairs / kRows, kSteps = kPositions / kRows;
  __shared__ H2 tile[kPairs][kPositions + 1];
  const int x = threadIdx.x, y = threadIdx.y;
  const int c0 = blockIdx.y * 2 * kPairs, p0 = blockIdx.x * kPositions;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const float* in = src + img * c * static_cast<int64_t>(hw);
    // c is even and dst 4-byte aligned, so every pair's first channel is too.
    H2* out = reinterpret_cast<H2*>(dst + img * c * static_cast<int64_t>(hw));
    // Channels c0 + 2r and c0 + 2r + 1 at positions p0 + x + 32j, r = y + kRows * i.
    float lo[kPairRows][kCols] = {}, hi[kPairRows][kCols] = {};
#pragma unroll
    for (int i = 0; i < kPairRows; ++i) {
      const int ch = c0 + 2 * (y + kRows * i);
      if (ch >= c) continue;
      const float* row = in + static_cast<int64_t>(ch) * hw + p0 + x;
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
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        if (c0 + 2 * (y + kRows * i) < c && p0 + x + 32 * j < hw) {
          tile[y + kRows * i][x + 32 * j] = Pair<H>::Make(lo[i][j], hi[i][j]);
        }
      }
    }
    __syncthreads();
    // Channels c0 + 2x and c0 + 2x + 1 at positions p0 + y + kRows * k.
    if (c0 + 2 * x < c) {
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        const int q = y + kRows * k;
        if (p0 + q < hw) out[static_cast<int64_t>(p0 + q) * (c / 2) + c0 / 2 + x] = tile[x][q];
      }
    }
    __syncthreads();
  }
}

// kAdd: dst = value + beta * dst; else dst = value, dst not read (it may hold anything, NaN).
// Apart, so that the overwriting copy keeps fewer registers and more blocks in flight.
template <typename H, int kCols, bool kAdd>
__global__ void __launch_bounds__(kPairs* kRows)
    FromNhwcPairsKernel(int n, int c, int hw, const H* __restrict__ src, float beta,
                        float* __restrict__ dst) {
  using H2 = typename Pair<H>::Type;
  constexpr int kPositions = 32 * kCols, kPairRows = kPairs / kRows, kSteps = kPositions / kRows;
  __shared__ H2 tile[kPairs][kPositions + 1];
  const int x = threadIdx.x, y = threadIdx.y;
  const int c0 = blockIdx.y * 2 * kPairs, p0 = blockIdx.x * kPositions;
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const H2* in = reinterpret_cast<const H2*>(src + img * c * static_cast<int64_t>(hw));
    float* out = dst + img * c * static_cast<int64_t>(hw);
    // Channels c0 + 2x and c0 + 2x + 1 at positions p0 + y + kRows * k.
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

template <typename H>
__global__ void __launch_bounds__(kFewThreads)
    ToNhwcFewKernel(int n, int c, int hw, const float* __restrict__ src, H* __restrict__ dst) {
  extern __shared__ __align__(16) unsigned char few_tile[];
  H* tile = reinterpret_cast<H*>(few_tile);
  const int p0 = blockIdx.x * kFewPositions, count = min(kFewPositions, hw - p0);
  for (int64_t img = blockIdx.z; img < n; img += gridDim.z) {
    const int64_t base = img * c * static_cast<int64_t>(hw);
    for (int ch = 0; ch < c; ++ch) {
      const float* row = src + base + static_cast<int64_t>(ch) * hw + p0;
      float v[kFewPerThread] = {};
#pragma unroll
      for (int j = 0; j < kFewPerThread; ++j) {
        const int p = threadIdx.x + kFewThreads * j;
        if (p < count) v[j] = row[p];
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
    const cudaDataType_t t = type == Context::HalfType::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
    const int lda = trans_a ? m : k;
    const int ldb = trans_b ? k : n;
    CORTADO_CUBLAS_CHECK(
        cublasGemmEx(::cortado::cuda::Get(ctx).cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, bh, t, ldb, ah, t, lda,
                     &beta, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
#endif
  Gemm(ctx, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
}

}  // namespace cortado::math::gpu
