// SPDX-License-Identifier: Apache-2.0
// Mixed precision (math/gpu.hpp): float32 tensors copied into float16 or bfloat16 operands,
// NCHW to NHWC for cuDNN's tensor-core convolutions, and back; and matrix products on
// float16/bfloat16 operands with float32 sums and results.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

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

// One 32 x 32 tile of a [c, hw] plane per block, through shared memory so that both the reads
// and the writes are coalesced; the grid's z dimension walks the images.
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

template <typename H>
__global__ void NarrowKernel(int64_t count, const float* __restrict__ src, H* __restrict__ dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = Narrow<H>(src[i]);
  }
}

dim3 TransposeGrid(int n, int c, int hw) {
  return dim3((hw + kTile - 1) / kTile, (c + kTile - 1) / kTile, std::min(n, 65535));
}

}  // namespace

void ToHalfNhwc(Context& ctx, Context::HalfType type, int n, int c, int hw, const float* src,
                void* dst) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  const dim3 block(kTile, kRows);
  cudaStream_t stream = ::cortado::cuda::Stream(ctx);
  if (type == Context::HalfType::kBFloat16) {
    ToNhwcKernel<<<TransposeGrid(n, c, hw), block, 0, stream>>>(n, c, hw, src,
                                                                static_cast<__nv_bfloat16*>(dst));
  } else {
    ToNhwcKernel<<<TransposeGrid(n, c, hw), block, 0, stream>>>(n, c, hw, src,
                                                                static_cast<__half*>(dst));
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void FromHalfNhwc(Context& ctx, Context::HalfType type, int n, int c, int hw, const void* src,
                  float beta, float* dst) {
  if (static_cast<int64_t>(n) * c * hw == 0) return;
  const dim3 block(kTile, kRows);
  cudaStream_t stream = ::cortado::cuda::Stream(ctx);
  if (type == Context::HalfType::kBFloat16) {
    FromNhwcKernel<<<TransposeGrid(n, c, hw), block, 0, stream>>>(
        n, c, hw, static_cast<const __nv_bfloat16*>(src), beta, dst);
  } else {
    FromNhwcKernel<<<TransposeGrid(n, c, hw), block, 0, stream>>>(
        n, c, hw, static_cast<const __half*>(src), beta, dst);
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
