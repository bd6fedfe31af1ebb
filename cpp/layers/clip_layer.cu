// SPDX-License-Identifier: Apache-2.0
// Clip on the GPU: the same rules as clip_layer.cpp, one element per thread.
#include "core/cuda.hpp"
#include "layers/clip_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void ClipForward(int n, const float* x, float lo, float hi, float* y) {
  CORTADO_KERNEL_LOOP(i, n) y[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

__global__ void ClipBackward(int n, const float* x, const float* dy, float lo, float hi,
                             float* dx) {
  CORTADO_KERNEL_LOOP(i, n) dx[i] = dy[i] * static_cast<float>(x[i] >= lo && x[i] <= hi);
}

}  // namespace

void ClipLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (bottom[0] == top[0]) {
    math::gpu::Copy(*ctx_, n, bottom[0]->gpu_data(), bottom_copy_.mutable_gpu_data());
  }
  ClipForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), min_, max_, top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void ClipLayer::BackwardGpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* x = bottom[0] == top[0] ? bottom_copy_.gpu_data() : bottom[0]->gpu_data();
  ClipBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, x, top[0]->gpu_diff(), min_, max_, bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
