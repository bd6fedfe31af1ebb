// SPDX-License-Identifier: Apache-2.0
// GPU matrix products and reductions (math/gpu.hpp).
#include "core/cuda.hpp"
#include "math/gpu.hpp"

namespace cortado::math::gpu {
namespace {

#if !CORTADO_WITH_CUBLAS
// C = alpha * op(A) op(B) + beta * C, row-major, one 16x16 tile of C per block.
constexpr int kTile = 16;

__global__ void GemmKernel(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                           const float* a, const float* b, float beta, float* c) {
  __shared__ float tile_a[kTile][kTile];
  __shared__ float tile_b[kTile][kTile + 1];
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kTile) {
    const int ka = k0 + threadIdx.x;  // column of op(A) this thread loads
    const int kb = k0 + threadIdx.y;  // row of op(B) this thread loads
    float va = 0.0f, vb = 0.0f;
    if (row < m && ka < k)
      va = trans_a ? a[static_cast<int64_t>(ka) * m + row] : a[static_cast<int64_t>(row) * k + ka];
    if (col < n && kb < k)
      vb = trans_b ? b[static_cast<int64_t>(col) * k + kb] : b[static_cast<int64_t>(kb) * n + col];
    tile_a[threadIdx.y][threadIdx.x] = va;
    tile_b[threadIdx.y][threadIdx.x] = vb;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) acc += tile_a[threadIdx.y][i] * tile_b[i][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) {
    float* out = c + static_cast<int64_t>(row) * n + col;
    *out = alpha * acc + (beta == 0.0f ? 0.0f : beta * *out);
  }
}
#endif

// Partial sums over a grid-stride range, one per block, then one block adds the partials.
// The grid is fixed, so the order of additions (and the result) is the same every run.
constexpr int kReduceThreads = 256;
constexpr int kReduceBlocks = 256;

enum class ReduceOp { kSum, kAbsSum, kSquareSum, kDot, kNonFinite };

template <ReduceOp op>
__device__ float Term(const float* x, const float* y, int64_t i) {
  if constexpr (op == ReduceOp::kSum) return x[i];
  if constexpr (op == ReduceOp::kAbsSum) return fabsf(x[i]);
  if constexpr (op == ReduceOp::kSquareSum) return x[i] * x[i];
  if constexpr (op == ReduceOp::kNonFinite) return isfinite(x[i]) ? 0.0f : 1.0f;
  return x[i] * y[i];
}

__device__ float BlockSum(float value) {
  __shared__ float warp_sums[kReduceThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = threadIdx.x < kReduceThreads / 32 ? warp_sums[threadIdx.x] : 0.0f;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2)
      value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

template <ReduceOp op>
__global__ void PartialSums(int n, const float* x, const float* y, float* partial) {
  float acc = 0.0f;
  CORTADO_KERNEL_LOOP(i, n) acc += Term<op>(x, y, i);
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void FinalSum(int count, const float* partial, float* result) {
  float acc = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) *result = acc;
}

template <ReduceOp op>
float Reduce(Context& ctx, int n, const float* x, const float* y) {
  if (n <= 0) return 0.0f;
  auto& res = ::cortado::cuda::Get(ctx);
  float* partial = res.ReduceBuffer();
  const int blocks = std::min(kReduceBlocks, (n + kReduceThreads - 1) / kReduceThreads);
  PartialSums<op><<<blocks, kReduceThreads, 0, res.stream>>>(n, x, y, partial);
  CORTADO_CUDA_CHECK_LAUNCH();
  FinalSum<<<1, kReduceThreads, 0, res.stream>>>(blocks, partial, partial + kReduceBlocks);
  CORTADO_CUDA_CHECK_LAUNCH();
  float* host = res.HostResult();
  CORTADO_CUDA_CHECK(cudaMemcpyAsync(host, partial + kReduceBlocks, sizeof(float),
                                     cudaMemcpyDeviceToHost, res.stream));
  CORTADO_CUDA_CHECK(cudaStreamSynchronize(res.stream));
  return *host;
}

}  // namespace

void Gemm(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
#if CORTADO_WITH_CUBLAS
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  CORTADO_CUBLAS_CHECK(cublasSgemm(
      ::cortado::cuda::Get(ctx).cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a, lda, &beta, c, n));
#else
  dim3 block(kTile, kTile);
  dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile);
  GemmKernel<<<grid, block, 0, ::cortado::cuda::Stream(ctx)>>>(trans_a, trans_b, m, n, k, alpha, a,
                                                               b, beta, c);
  CORTADO_CUDA_CHECK_LAUNCH();
#endif
}

void Gemv(Context& ctx, bool trans_a, int m, int n, float alpha, const float* a, const float* x,
          float beta, float* y) {
#if CORTADO_WITH_CUBLAS
  // Row-major A (m x n) is column-major A^T (n x m): the transposition flips.
  CORTADO_CUBLAS_CHECK(cublasSgemv(::cortado::cuda::Get(ctx).cublas,
                                   trans_a ? CUBLAS_OP_N : CUBLAS_OP_T, n, m, &alpha, a, n, x, 1,
                                   &beta, y, 1));
#else
  // y (length rows of op(A)) = op(A) x: a Gemm with one column.
  if (trans_a) {
    Gemm(ctx, true, false, n, 1, m, alpha, a, x, beta, y);
  } else {
    Gemm(ctx, false, false, m, 1, n, alpha, a, x, beta, y);
  }
#endif
}

float Dot(Context& ctx, int n, const float* x, const float* y) {
  return Reduce<ReduceOp::kDot>(ctx, n, x, y);
}
float Asum(Context& ctx, int n, const float* x) {
  return Reduce<ReduceOp::kAbsSum>(ctx, n, x, nullptr);
}
float Sum(Context& ctx, int n, const float* x) {
  return Reduce<ReduceOp::kSum>(ctx, n, x, nullptr);
}
float Sumsq(Context& ctx, int n, const float* x) {
  return Reduce<ReduceOp::kSquareSum>(ctx, n, x, nullptr);
}
float NonFiniteCount(Context& ctx, int n, const float* x) {
  return Reduce<ReduceOp::kNonFinite>(ctx, n, x, nullptr);
}

}  // namespace cortado::math::gpu
