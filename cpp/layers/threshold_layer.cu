// SPDX-License-Identifier: Apache-2.0
// Threshold on the GPU: the same rule as threshold_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/threshold_layer.hpp"

namespace cortado {
namespace {

__global__ void ThresholdForward(int n, const float* x, float threshold, float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = x[i] > threshold ? 1.0f : 0.0f;
}

}  // namespace

void ThresholdLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  ThresholdForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), param_.threshold_param().threshold(), top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void ThresholdLayer::BackwardGpu(const std::vector<Tensor*>& /*top*/,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& /*bottom*/) {
  RefuseBackward(propagate_down);
}

}  // namespace cortado
