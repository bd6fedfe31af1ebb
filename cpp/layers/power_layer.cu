// SPDX-License-Identifier: Apache-2.0
// Power on the GPU: the same rules and special cases as power_layer.cpp, one element per thread.
#include <cmath>

#include "core/cuda.hpp"
#include "layers/power_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void PowerLinear(int n, const float* x, float scale, float shift, float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = shift + scale * x[i];
}

__global__ void PowerForward(int n, const float* x, float power, float scale, float shift,
                             float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = powf(shift + scale * x[i], power);
}

// power == 2: dy/dx = 2 * scale * (shift + scale * x).
__global__ void PowerSquareBackward(int n, const float* x, const float* dy, float diff_scale,
                                    float scale, float shift, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = dy[i] * diff_scale * (shift + scale * x[i]);
}

// Otherwise dy/dx = power * scale * y / (shift + scale * x), reusing y as the CPU pass does.
__global__ void PowerBackward(int n, const float* x, const float* y, const float* dy,
                              float diff_scale, float scale, float shift, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = dy[i] * diff_scale * y[i] / (shift + scale * x[i]);
}

}  // namespace

void PowerLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  float* y = top[0]->mutable_gpu_data();
  if (diff_scale_ == 0.0f) {
    math::gpu::Set(*ctx_, n, power_ == 0.0f ? 1.0f : std::pow(shift_, power_), y);
    return;
  }
  if (KeepsBottom(bottom, top)) {
    math::gpu::Copy(*ctx_, n, bottom[0]->gpu_data(), bottom_copy_.mutable_gpu_data());
  }
  const float* x = bottom[0]->gpu_data();
  if (power_ == 1.0f) {
    PowerLinear<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(n, x, scale_, shift_,
                                                                             y);
  } else {
    PowerForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(n, x, power_, scale_,
                                                                              shift_, y);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void PowerLayer::BackwardGpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* dy = top[0]->gpu_diff();
  float* dx = bottom[0]->mutable_gpu_diff();
  // In place dx and dy are the same buffer: each thread reads dy[i] before it writes dx[i].
  if (diff_scale_ == 0.0f) {
    math::gpu::Set(*ctx_, n, 0.0f, dx);
    return;
  }
  if (power_ == 1.0f) {
    math::gpu::Scale(*ctx_, n, diff_scale_, dy, dx);
    return;
  }
  const float* x = KeepsBottom(bottom, top) ? bottom_copy_.gpu_data() : bottom[0]->gpu_data();
  if (power_ == 2.0f) {
    PowerSquareBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
        n, x, dy, diff_scale_, scale_, shift_, dx);
  } else {
    PowerBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
        n, x, top[0]->gpu_data(), dy, diff_scale_, scale_, shift_, dx);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
