// SPDX-License-Identifier: Apache-2.0
// Math on whichever device a context is: each function calls the CPU version (math/math.hpp)
// or the GPU one (math/gpu.hpp), and the tensor accessors hand out pointers on that device.
// For code that is the same on both (the solvers' update rules), so it is written once.
#pragma once

#include <cmath>

#include "core/config.hpp"
#include "core/context.hpp"
#include "core/tensor.hpp"
#include "math/math.hpp"
#if CORTADO_WITH_CUDA
#include "math/gpu.hpp"
#endif

namespace cortado::math::dev {

inline bool OnGpu(const Context& ctx) { return ctx.device().is_cuda(); }

inline const float* Data(Context& ctx, const Tensor& t) {
  return OnGpu(ctx) ? t.gpu_data() : t.cpu_data();
}
inline const float* Diff(Context& ctx, const Tensor& t) {
  return OnGpu(ctx) ? t.gpu_diff() : t.cpu_diff();
}
inline float* MutableData(Context& ctx, Tensor& t) {
  return OnGpu(ctx) ? t.mutable_gpu_data() : t.mutable_cpu_data();
}
inline float* MutableDiff(Context& ctx, Tensor& t) {
  return OnGpu(ctx) ? t.mutable_gpu_diff() : t.mutable_cpu_diff();
}

inline void Axpy([[maybe_unused]] Context& ctx, int n, float alpha, const float* x, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Axpy(ctx, n, alpha, x, y);
#endif
  math::Axpy(n, alpha, x, y);
}
inline void Axpby([[maybe_unused]] Context& ctx, int n, float alpha, const float* x, float beta,
                  float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Axpby(ctx, n, alpha, x, beta, y);
#endif
  math::Axpby(n, alpha, x, beta, y);
}
inline void Scale([[maybe_unused]] Context& ctx, int n, float alpha, float* x) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Scale(ctx, n, alpha, x);
#endif
  math::Scale(n, alpha, x);
}
inline void Scale([[maybe_unused]] Context& ctx, int n, float alpha, const float* x, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Scale(ctx, n, alpha, x, y);
#endif
  math::Scale(n, alpha, x, y);
}
inline void Set([[maybe_unused]] Context& ctx, int n, float value, float* x) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Set(ctx, n, value, x);
#endif
  math::Set(n, value, x);
}
inline void SgdUpdateMany([[maybe_unused]] Context& ctx, const std::vector<SgdTensor>& tensors,
                          float momentum, float diff_scale) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::SgdUpdateMany(ctx, tensors, momentum, diff_scale);
#endif
  math::SgdUpdateMany(tensors, momentum, diff_scale);
}
inline void Copy([[maybe_unused]] Context& ctx, int n, const float* x, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Copy(ctx, n, x, y);
#endif
  math::Copy(n, x, y);
}
inline void AddScalar([[maybe_unused]] Context& ctx, int n, float alpha, float* x) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::AddScalar(ctx, n, alpha, x);
#endif
  math::AddScalar(n, alpha, x);
}
inline float Sumsq([[maybe_unused]] Context& ctx, int n, const float* x) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Sumsq(ctx, n, x);
#endif
  return math::Dot(n, x, x);
}
inline float Asum([[maybe_unused]] Context& ctx, int n, const float* x) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Asum(ctx, n, x);
#endif
  return math::Asum(n, x);
}

// Whether every one of x's n values is finite (no infinity, no NaN).
inline bool AllFinite([[maybe_unused]] Context& ctx, int n, const float* x) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::NonFiniteCount(ctx, n, x) == 0.0f;
#endif
  bool finite = true;
  for (int i = 0; i < n; ++i) finite &= std::isfinite(x[i]);
  return finite;
}

inline void Add([[maybe_unused]] Context& ctx, int n, const float* a, const float* b, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Add(ctx, n, a, b, y);
#endif
  math::Add(n, a, b, y);
}
inline void Sub([[maybe_unused]] Context& ctx, int n, const float* a, const float* b, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Sub(ctx, n, a, b, y);
#endif
  math::Sub(n, a, b, y);
}
inline void Mul([[maybe_unused]] Context& ctx, int n, const float* a, const float* b, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Mul(ctx, n, a, b, y);
#endif
  math::Mul(n, a, b, y);
}
inline void Div([[maybe_unused]] Context& ctx, int n, const float* a, const float* b, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Div(ctx, n, a, b, y);
#endif
  math::Div(n, a, b, y);
}
inline void Sqr([[maybe_unused]] Context& ctx, int n, const float* a, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Sqr(ctx, n, a, y);
#endif
  math::Sqr(n, a, y);
}
inline void Sqrt([[maybe_unused]] Context& ctx, int n, const float* a, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Sqrt(ctx, n, a, y);
#endif
  math::Sqrt(n, a, y);
}
inline void Sign([[maybe_unused]] Context& ctx, int n, const float* a, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Sign(ctx, n, a, y);
#endif
  math::Sign(n, a, y);
}
inline void Powx([[maybe_unused]] Context& ctx, int n, const float* a, float b, float* y) {
#if CORTADO_WITH_CUDA
  if (OnGpu(ctx)) return gpu::Powx(ctx, n, a, b, y);
#endif
  math::Powx(n, a, b, y);
}

}  // namespace cortado::math::dev
