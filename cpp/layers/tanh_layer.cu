// SPDX-License-Identifier: Apache-2.0
// TanH on the GPU: the same rules as tanh_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/tanh_layer.hpp"

namespace cortado {
namespace {

__global__ void TanHForward(int n, const float* x, float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = tanhf(x[i]);
}

__global__ void TanHBackward(int n, const float* y, const float* dy, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

}  // namespace

void TanHLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  TanHForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void TanHLayer::BackwardGpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  TanHBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, top[0]->gpu_data(), top[0]->gpu_diff(), bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
