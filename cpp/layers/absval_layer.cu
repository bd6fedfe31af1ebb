// SPDX-License-Identifier: Apache-2.0
// AbsVal on the GPU: the same rules as absval_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/absval_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void AbsValForward(int n, const float* x, float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = fabsf(x[i]);
}

__global__ void AbsValBackward(int n, const float* x, const float* dy, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float sign = static_cast<float>((0.0f < x[i]) - (x[i] < 0.0f));
    dx[i] = dy[i] * sign;
  }
}

}  // namespace

void AbsValLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (bottom[0] == top[0]) {
    math::gpu::Copy(*ctx_, n, bottom[0]->gpu_data(), bottom_copy_.mutable_gpu_data());
  }
  AbsValForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void AbsValLayer::BackwardGpu(const std::vector<Tensor*>& top,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* x = bottom[0] == top[0] ? bottom_copy_.gpu_data() : bottom[0]->gpu_data();
  AbsValBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, x, top[0]->gpu_diff(), bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
