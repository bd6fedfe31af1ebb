// SPDX-License-Identifier: Apache-2.0
// Log on the GPU: the same rules as log_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/log_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void LogForward(int n, const float* x, float base_scale, float scale, float shift,
                           float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = base_scale * logf(shift + scale * x[i]);
}

__global__ void LogBackward(int n, const float* x, const float* dy, float numerator, float scale,
                            float shift, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = dy[i] * numerator / (shift + scale * x[i]);
}

}  // namespace

void LogLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (bottom[0] == top[0]) {
    math::gpu::Copy(*ctx_, n, bottom[0]->gpu_data(), bottom_copy_.mutable_gpu_data());
  }
  LogForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), base_scale_, input_scale_, input_shift_,
      top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void LogLayer::BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* x = bottom[0] == top[0] ? bottom_copy_.gpu_data() : bottom[0]->gpu_data();
  LogBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, x, top[0]->gpu_diff(), input_scale_ * base_scale_, input_scale_, input_shift_,
      bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
