// SPDX-License-Identifier: Apache-2.0
// The math primitives layers call (never BLAS or oneDNN directly). CPU versions here; the
// CUDA versions are declared in math/gpu.hpp under the same names in cortado::math::gpu.
//
// Matrices are row-major. All pointers are host pointers; n is an element count.
// Element-wise functions accept out == in (in-place) unless stated otherwise.
#pragma once

#include <cstddef>
#include <vector>

#include "core/context.hpp"

namespace cortado::math {

// Element counts below which the CPU loops of math and layers run on one thread: below it an
// OpenMP parallel region costs more than it saves (`#pragma omp parallel for if (n >
// kParallelThreshold)`).
inline constexpr int kParallelThreshold = 1 << 15;

// Cortado's own CPU loops are built for the x86-64 baseline (SSE2); a function marked
// CORTADO_CPU_CLONES is also built for AVX2 and AVX-512, and the loader picks the version the
// CPU runs (GCC's target_clones). None fuses a multiply and an add (GCC's avx512f target allows
// FMA, but the build's -ffp-contract=off keeps it from contracting), so each operation rounds as
// in the baseline: the same bits on every CPU, only wider vectors.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define CORTADO_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CORTADO_CPU_CLONES
#endif

// C = alpha * op(A) * op(B) + beta * C, with op(A) M x K, op(B) K x N, C M x N.
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
          const float* b, float beta, float* c);
// y = alpha * op(A) * x + beta * y, with A M x N (op(A) is N x M when trans_a).
void Gemv(bool trans_a, int m, int n, float alpha, const float* a, const float* x, float beta,
          float* y);

// One tensor of an SGD step with momentum (solvers/sgd_solver.cpp), in Caffe's order:
//   g = diff * diff_scale + decay * data;  history = rate * g + momentum * history;
//   diff = history;  data -= history.
struct SgdTensor {
  float* data;
  float* diff;
  float* history;
  int count;
  float rate;   // the learning rate times the parameter's lr_mult
  float decay;  // weight_decay times the parameter's decay_mult (L2)
};
// The step for every tensor in one pass and one parallel loop (each value alone, so the thread
// count changes nothing). As the per-parameter path: no scaling where diff_scale is 1, no decay
// where it is 0.
void SgdUpdateMany(const std::vector<SgdTensor>& tensors, float momentum, float diff_scale);

void Axpy(int n, float alpha, const float* x, float* y);               // y += alpha * x
void Axpby(int n, float alpha, const float* x, float beta, float* y);  // y = a*x + b*y
void Scale(int n, float alpha, float* x);                              // x *= alpha
void Scale(int n, float alpha, const float* x, float* y);              // y = alpha * x
void Set(int n, float value, float* x);
void Copy(int n, const float* x, float* y);
void AddScalar(int n, float alpha, float* x);  // x += alpha
float Dot(int n, const float* x, const float* y);
float StridedDot(int n, const float* x, int incx, const float* y, int incy);
float Asum(int n, const float* x);  // sum |x|
float Sum(int n, const float* x);

void Add(int n, const float* a, const float* b, float* y);  // y = a + b
void Sub(int n, const float* a, const float* b, float* y);  // y = a - b
void Mul(int n, const float* a, const float* b, float* y);  // y = a * b
void Div(int n, const float* a, const float* b, float* y);  // y = a / b
void Sqr(int n, const float* a, float* y);
void Sqrt(int n, const float* a, float* y);
void Exp(int n, const float* a, float* y);
void Log(int n, const float* a, float* y);
void Abs(int n, const float* a, float* y);
void Powx(int n, const float* a, float b, float* y);  // y = a ^ b
void Sign(int n, const float* a, float* y);           // -1, 0 or 1

// Random numbers from the context's engine; the same engine and seed give the same values.
void RngUniform(int n, float lo, float hi, Rng& rng, float* r);  // [lo, hi)
void RngGaussian(int n, float mean, float stddev, Rng& rng, float* r);
void RngBernoulli(int n, float p, Rng& rng, unsigned int* r);  // 1 with probability p

// Caffe's im2col for 2-D convolution: the image (channels x height x width) becomes a
// (channels*kernel_h*kernel_w) x (output_h*output_w) matrix; padding reads as zero.
void Im2col(const float* image, int channels, int height, int width, int kernel_h, int kernel_w,
            int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h, int dilation_w,
            float* columns);
// The adjoint of Im2col: accumulates columns back into a zeroed image.
void Col2im(const float* columns, int channels, int height, int width, int kernel_h, int kernel_w,
            int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h, int dilation_w,
            float* image);
// N-D versions: num_spatial_axes spatial dimensions; shapes are {channels, spatial...}.
void Im2colNd(const float* image, int num_spatial_axes, const int* image_shape,
              const int* column_shape, const int* kernel_shape, const int* pad, const int* stride,
              const int* dilation, float* columns);
void Col2imNd(const float* columns, int num_spatial_axes, const int* image_shape,
              const int* column_shape, const int* kernel_shape, const int* pad, const int* stride,
              const int* dilation, float* image);

}  // namespace cortado::math
