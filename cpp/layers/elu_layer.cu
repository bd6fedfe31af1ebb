// SPDX-License-Identifier: Apache-2.0
// ELU on the GPU: the same rules as elu_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/elu_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void ELUForward(int n, const float* x, float alpha, float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = x[i] > 0.0f ? x[i] : alpha * (expf(x[i]) - 1.0f);
}

// dx = dy for x > 0, dy * (y + alpha) otherwise; in place x is the top (see the header).
__global__ void ELUBackward(int n, const float* x, const float* y, const float* dy, float alpha,
                            float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = x[i] > 0.0f ? dy[i] : dy[i] * (y[i] + alpha);
}

}  // namespace

void ELULayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (KeepsBottom(bottom, top)) {
    math::gpu::Copy(*ctx_, n, bottom[0]->gpu_data(), bottom_copy_.mutable_gpu_data());
  }
  ELUForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), param_.elu_param().alpha(), top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void ELULayer::BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* x = KeepsBottom(bottom, top) ? bottom_copy_.gpu_data() : bottom[0]->gpu_data();
  ELUBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, x, top[0]->gpu_data(), top[0]->gpu_diff(), param_.elu_param().alpha(),
      bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
