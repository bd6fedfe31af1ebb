// SPDX-License-Identifier: Apache-2.0
// Sigmoid on the GPU: the same rules as sigmoid_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/sigmoid_layer.hpp"

namespace cortado {
namespace {

__global__ void SigmoidForward(int n, const float* x, float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = 0.5f * tanhf(0.5f * x[i]) + 0.5f;
}

__global__ void SigmoidBackward(int n, const float* y, const float* dy, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

}  // namespace

void SigmoidLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  SigmoidForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void SigmoidLayer::BackwardGpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  SigmoidBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, top[0]->gpu_data(), top[0]->gpu_diff(), bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
