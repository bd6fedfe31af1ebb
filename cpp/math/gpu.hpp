// SPDX-License-Identifier: Apache-2.0
// The CUDA versions of the math primitives in math/math.hpp, under the same names in
// namespace cortado::math::gpu. Every function takes the Context whose stream it runs on;
// all pointers are device pointers of that context's device. Work is queued on the stream
// and returns at once, except functions that return a value to the host (Dot, Asum, Sum,
// Sumsq), which wait for it.
//
// Matrices are row-major, as on the CPU. Gemm/Gemv run on cuBLAS when the build has it and
// on our own tiled kernels otherwise. Random numbers come from a counter-based generator
// (Philox4x32-10) keyed by the context's seed, so a seeded run repeats exactly.
// Available only where CORTADO_WITH_CUDA is 1.
#pragma once

#include <cstdint>
#include <vector>

#include "core/context.hpp"
#include "math/math.hpp"

namespace cortado::math::gpu {

void Gemm(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, const float* b, float beta, float* c);
void Gemv(Context& ctx, bool trans_a, int m, int n, float alpha, const float* a, const float* x,
          float beta, float* y);

// Mixed precision (Context::half_compute). GemmMixed is Gemm with its operands rounded to the
// context's half type and the sums and C kept in float32 (cuBLAS tensor cores); plain Gemm when
// the context has no half type or the build has no cuBLAS. The copies live in the context's
// half scratch (cuda::Resources::HalfScratch).
void GemmMixed(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
               const float* a, const float* b, float beta, float* c);
// Half tensors: C = alpha op(A) op(B) + beta C (row-major, as Gemm) with A and B already in
// `type` and the sums in float32 (cuBLAS tensor cores); C is in `type` where c_in_type (read,
// scaled by beta and rounded once when written), else float32. Throws in a build without cuBLAS.
void GemmHalfOperands(Context& ctx, Context::HalfType type, bool trans_a, bool trans_b, int m,
                      int n, int k, float alpha, const void* a, const void* b, float beta, void* c,
                      bool c_in_type);
// float32 [n, c, hw] (NCHW) into `type` [n, hw, c] (NHWC), rounding to nearest even.
void ToHalfNhwc(Context& ctx, Context::HalfType type, int n, int c, int hw, const float* src,
                void* dst);
// `type` [n, hw, c] back into float32 [n, c, hw]: dst = src + beta * dst (beta 0 overwrites).
void FromHalfNhwc(Context& ctx, Context::HalfType type, int n, int c, int hw, const void* src,
                  float beta, float* dst);
// count floats into `type`, element by element.
void ToHalf(Context& ctx, Context::HalfType type, int64_t count, const float* src, void* dst);

void Axpy(Context& ctx, int n, float alpha, const float* x, float* y);  // y += a*x
void Axpby(Context& ctx, int n, float alpha, const float* x, float beta,
           float* y);                                                    // y = a*x + b*y
void Scale(Context& ctx, int n, float alpha, float* x);                  // x *= a
void Scale(Context& ctx, int n, float alpha, const float* x, float* y);  // y = a*x
void Set(Context& ctx, int n, float value, float* x);
void Copy(Context& ctx, int n, const float* x, float* y);
void AddScalar(Context& ctx, int n, float alpha, float* x);  // x += alpha
float Dot(Context& ctx, int n, const float* x, const float* y);
float Asum(Context& ctx, int n, const float* x);   // sum |x|
float Sum(Context& ctx, int n, const float* x);    // sum x
float Sumsq(Context& ctx, int n, const float* x);  // sum x^2
// How many of x's values are infinite or NaN (exact up to 2^24; 0 means all finite).
float NonFiniteCount(Context& ctx, int n, const float* x);

void Add(Context& ctx, int n, const float* a, const float* b, float* y);  // y = a + b
void Sub(Context& ctx, int n, const float* a, const float* b, float* y);  // y = a - b
void Mul(Context& ctx, int n, const float* a, const float* b, float* y);  // y = a * b
void Div(Context& ctx, int n, const float* a, const float* b, float* y);  // y = a / b
void Sqr(Context& ctx, int n, const float* a, float* y);
void Sqrt(Context& ctx, int n, const float* a, float* y);
void Exp(Context& ctx, int n, const float* a, float* y);
void Log(Context& ctx, int n, const float* a, float* y);
void Abs(Context& ctx, int n, const float* a, float* y);
void Powx(Context& ctx, int n, const float* a, float b, float* y);  // y = a ^ b
void Sign(Context& ctx, int n, const float* a, float* y);           // -1, 0 or 1

// Many tensors in a few launches (kMultiTensorBatch pieces of up to 2^20 elements each) instead
// of one or more launches each: a deep net's hundreds of small parameters otherwise cost more in
// launches than in work.
constexpr int kMultiTensorBatch = 96;
struct DeviceSpan {
  float* ptr;
  int count;
};
void ZeroMany(Context& ctx, const std::vector<DeviceSpan>& tensors);
// The CPU version's tensors (math/math.hpp).
using SgdTensor = math::SgdTensor;
void SgdUpdateMany(Context& ctx, const std::vector<SgdTensor>& tensors, float momentum,
                   float diff_scale);

// Random numbers from the context's device generator (advances its counter by n).
void RngUniform(Context& ctx, int n, float lo, float hi, float* r);  // [lo, hi)
void RngGaussian(Context& ctx, int n, float mean, float stddev, float* r);
void RngBernoulli(Context& ctx, int n, float p, unsigned int* r);  // 1 with probability p
// n raw 32-bit random words (Dropout compares them with a threshold, as Caffe does).
void RngBits(Context& ctx, int n, unsigned int* r);

// im2col/col2im as in math/math.hpp, on the device. Col2im overwrites the image.
void Im2col(Context& ctx, const float* image, int channels, int height, int width, int kernel_h,
            int kernel_w, int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h,
            int dilation_w, float* columns);
void Col2im(Context& ctx, const float* columns, int channels, int height, int width, int kernel_h,
            int kernel_w, int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h,
            int dilation_w, float* image);
// N-D versions (up to 6 spatial axes); the shape arrays are host pointers.
void Im2colNd(Context& ctx, const float* image, int num_spatial_axes, const int* image_shape,
              const int* column_shape, const int* kernel_shape, const int* pad, const int* stride,
              const int* dilation, float* columns);
void Col2imNd(Context& ctx, const float* columns, int num_spatial_axes, const int* image_shape,
              const int* column_shape, const int* kernel_shape, const int* pad, const int* stride,
              const int* dilation, float* image);

// Half tensors (Layer::HalfTensors): 16-bit values of `type` on both sides, exactly (one rounding
// where a float32 bias is added). [n, c, hw] (NCHW) into [n, hw, c] (NHWC), for cuDNN.
void HalfNchwToNhwc(Context& ctx, Context::HalfType type, int n, int c, int hw, const void* src,
                    void* dst);
// [n, hw, c] back into [n, c, hw], adding bias[c] (float32 values; none when null) before the
// rounding.
void HalfNhwcToNchw(Context& ctx, Context::HalfType type, int n, int c, int hw, const void* src,
                    const float* bias, void* dst);
// x[n, c, :] += bias[c] on [n, c, hw] values of `type`, added in float32 and rounded once.
void AddChannelBiasHalf(Context& ctx, Context::HalfType type, int n, int c, int hw,
                        const float* bias, void* x);
// sums[c] += the float32 sum of x[:, c, :] over [n, c, hw] values of `type` (a bias gradient),
// in a fixed order, so the result repeats bit for bit. Its partial sums use the context's reduce
// buffer (cuda::Resources::ReduceBuffer).
void SumChannelsHalf(Context& ctx, Context::HalfType type, int n, int c, int hw, const void* x,
                     float* sums);
// The same two on channels-last values, [rows][c] (rows = n * h * w).
void AddChannelBiasHalfNhwc(Context& ctx, Context::HalfType type, int64_t rows, int c,
                            const float* bias, void* x);
void SumChannelsHalfNhwc(Context& ctx, Context::HalfType type, int64_t rows, int c, const void* x,
                         float* sums);

}  // namespace cortado::math::gpu
