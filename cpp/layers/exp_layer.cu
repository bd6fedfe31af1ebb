// SPDX-License-Identifier: Apache-2.0
// Exp on the GPU: the same rules as exp_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/exp_layer.hpp"

namespace cortado {
namespace {

__global__ void ExpForward(int n, const float* x, float inner, float outer, float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = outer * expf(inner * x[i]);
}

__global__ void ExpBackward(int n, const float* y, const float* dy, float inner, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = dy[i] * y[i] * inner;
}

}  // namespace

void ExpLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  ExpForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), inner_scale_, outer_scale_, top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void ExpLayer::BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  ExpBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, top[0]->gpu_data(), top[0]->gpu_diff(), inner_scale_, bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
