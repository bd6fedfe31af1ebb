// SPDX-License-Identifier: Apache-2.0
// ReLU on the GPU: the same rules as relu_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/relu_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void ReLUForward(int n, const float* x, float slope, float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = x[i] > 0.0f ? x[i] : x[i] * slope;
}

__global__ void ReLUBackward(int n, const float* sign_source, const float* dy, float slope,
                             float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = sign_source[i] > 0.0f ? dy[i] : dy[i] * slope;
}

}  // namespace

void ReLULayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const float slope = param_.relu_param().negative_slope();
  if (KeepsBottom(bottom, top)) {
    math::gpu::Copy(*ctx_, n, bottom[0]->gpu_data(), bottom_copy_.mutable_gpu_data());
  }
  ReLUForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), slope, top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void ReLULayer::BackwardGpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float slope = param_.relu_param().negative_slope();
  const float* sign_source = KeepsBottom(bottom, top)
                                 ? bottom_copy_.gpu_data()
                                 : (slope < 0.0f ? bottom[0]->gpu_data() : top[0]->gpu_data());
  ReLUBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, sign_source, top[0]->gpu_diff(), slope, bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
