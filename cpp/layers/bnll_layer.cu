// SPDX-License-Identifier: Apache-2.0
// BNLL on the GPU: the same rules as bnll_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/bnll_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void BNLLForward(int n, const float* x, float* y) {
  CORTADO_KERNEL_LOOP(i, n) {
    y[i] = x[i] > 0.0f ? x[i] + log1pf(expf(-x[i])) : log1pf(expf(x[i]));
  }
}

__global__ void BNLLBackward(int n, const float* x, const float* dy, float threshold, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float e = expf(fminf(x[i], threshold));
    dx[i] = dy[i] * e / (e + 1.0f);
  }
}

}  // namespace

void BNLLLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (bottom[0] == top[0]) {
    math::gpu::Copy(*ctx_, n, bottom[0]->gpu_data(), bottom_copy_.mutable_gpu_data());
  }
  BNLLForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void BNLLLayer::BackwardGpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* x = bottom[0] == top[0] ? bottom_copy_.gpu_data() : bottom[0]->gpu_data();
  BNLLBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, x, top[0]->gpu_diff(), kBNLLThreshold, bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
