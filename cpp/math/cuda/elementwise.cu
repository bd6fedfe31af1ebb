// SPDX-License-Identifier: Apache-2.0
// GPU element-wise primitives (math/gpu.hpp).
#include "core/cuda.hpp"
#include "math/gpu.hpp"

namespace cortado::math::gpu {
namespace {

template <typename F>
__global__ void Map1(int n, const float* a, float* y, F f) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = f(a[i]);
}

template <typename F>
__global__ void Map2(int n, const float* a, const float* b, float* y, F f) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = f(a[i], b[i]);
}

template <typename F>
void Unary(Context& ctx, int n, const float* a, float* y, F f) {
  if (n <= 0) return;
  Map1<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0, ::cortado::cuda::Stream(ctx)>>>(
      n, a, y, f);
  CORTADO_CUDA_CHECK_LAUNCH();
}

template <typename F>
void Binary(Context& ctx, int n, const float* a, const float* b, float* y, F f) {
  if (n <= 0) return;
  Map2<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0, ::cortado::cuda::Stream(ctx)>>>(
      n, a, b, y, f);
  CORTADO_CUDA_CHECK_LAUNCH();
}

struct ScaleBy {
  float alpha;
  __device__ float operator()(float x) const { return alpha * x; }
};
struct AddValue {
  float alpha;
  __device__ float operator()(float x) const { return x + alpha; }
};
struct Constant {
  float value;
  __device__ float operator()(float) const { return value; }
};
struct AxpyOp {
  float alpha;
  __device__ float operator()(float x, float y) const { return alpha * x + y; }
};
struct AxpbyOp {
  float alpha, beta;
  __device__ float operator()(float x, float y) const { return alpha * x + beta * y; }
};
struct PowOp {
  float b;
  __device__ float operator()(float x) const { return powf(x, b); }
};

}  // namespace

void Axpy(Context& ctx, int n, float alpha, const float* x, float* y) {
  Binary(ctx, n, x, y, y, AxpyOp{alpha});
}
void Axpby(Context& ctx, int n, float alpha, const float* x, float beta, float* y) {
  Binary(ctx, n, x, y, y, AxpbyOp{alpha, beta});
}
void Scale(Context& ctx, int n, float alpha, float* x) { Unary(ctx, n, x, x, ScaleBy{alpha}); }
void Scale(Context& ctx, int n, float alpha, const float* x, float* y) {
  Unary(ctx, n, x, y, ScaleBy{alpha});
}
void Set(Context& ctx, int n, float value, float* x) {
  if (n <= 0) return;
  if (value == 0.0f) {
    CORTADO_CUDA_CHECK(cudaMemsetAsync(x, 0, sizeof(float) * static_cast<size_t>(n),
                                       ::cortado::cuda::Stream(ctx)));
    return;
  }
  Unary(ctx, n, x, x, Constant{value});
}
void Copy(Context& ctx, int n, const float* x, float* y) {
  if (n <= 0 || x == y) return;
  CORTADO_CUDA_CHECK(cudaMemcpyAsync(y, x, sizeof(float) * static_cast<size_t>(n),
                                     cudaMemcpyDeviceToDevice, ::cortado::cuda::Stream(ctx)));
}
void AddScalar(Context& ctx, int n, float alpha, float* x) { Unary(ctx, n, x, x, AddValue{alpha}); }

void Add(Context& ctx, int n, const float* a, const float* b, float* y) {
  Binary(ctx, n, a, b, y, [] __device__(float p, float q) { return p + q; });
}
void Sub(Context& ctx, int n, const float* a, const float* b, float* y) {
  Binary(ctx, n, a, b, y, [] __device__(float p, float q) { return p - q; });
}
void Mul(Context& ctx, int n, const float* a, const float* b, float* y) {
  Binary(ctx, n, a, b, y, [] __device__(float p, float q) { return p * q; });
}
void Div(Context& ctx, int n, const float* a, const float* b, float* y) {
  Binary(ctx, n, a, b, y, [] __device__(float p, float q) { return p / q; });
}
void Sqr(Context& ctx, int n, const float* a, float* y) {
  Unary(ctx, n, a, y, [] __device__(float p) { return p * p; });
}
void Sqrt(Context& ctx, int n, const float* a, float* y) {
  Unary(ctx, n, a, y, [] __device__(float p) { return sqrtf(p); });
}
void Exp(Context& ctx, int n, const float* a, float* y) {
  Unary(ctx, n, a, y, [] __device__(float p) { return expf(p); });
}
void Log(Context& ctx, int n, const float* a, float* y) {
  Unary(ctx, n, a, y, [] __device__(float p) { return logf(p); });
}
void Abs(Context& ctx, int n, const float* a, float* y) {
  Unary(ctx, n, a, y, [] __device__(float p) { return fabsf(p); });
}
void Powx(Context& ctx, int n, const float* a, float b, float* y) { Unary(ctx, n, a, y, PowOp{b}); }
void Sign(Context& ctx, int n, const float* a, float* y) {
  Unary(ctx, n, a, y,
        [] __device__(float p) { return static_cast<float>((0.0f < p) - (p < 0.0f)); });
}

}  // namespace cortado::math::gpu
