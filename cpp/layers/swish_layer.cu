// SPDX-License-Identifier: Apache-2.0
// Swish on the GPU: the same rules as swish_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/swish_layer.hpp"

namespace cortado {
namespace {

__global__ void SwishForward(int n, const float* x, float beta, float* s, float* y) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float xi = x[i];  // read before writing y: in place y is x
    const float si = 0.5f * tanhf(0.5f * (beta * xi)) + 0.5f;
    s[i] = si;
    y[i] = xi * si;
  }
}

__global__ void SwishBackward(int n, const float* y, const float* s, const float* dy, float beta,
                              float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = dy[i] * (beta * y[i] + s[i] * (1.0f - beta * y[i]));
}

}  // namespace

void SwishLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  SwishForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), param_.swish_param().beta(), sigmoid_.mutable_gpu_data(),
      top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void SwishLayer::BackwardGpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  SwishBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, top[0]->gpu_data(), sigmoid_.gpu_data(), top[0]->gpu_diff(), param_.swish_param().beta(),
      bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
