// SPDX-License-Identifier: Apache-2.0
// EuclideanLoss on the GPU: the same results as euclidean_loss_layer.cpp; the sum of squares is
// reduced on the device and the loss written to the top there (no host round trip).
#include "core/cuda.hpp"
#include "layers/euclidean_loss_layer.hpp"
#include "layers/loss_reduction.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

// dx = (sign * w / num) * (a - b), w the loss top's diff (a device scalar).
__global__ void EuclideanBackward(int n, const float* diff, const float* top_diff, float sign,
                                  float num, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float alpha = sign * top_diff[0] / num;
    dx[i] = alpha * diff[i];
  }
}

}  // namespace

void EuclideanLossLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                    const std::vector<Tensor*>& top) {
  const int count = bottom[0]->count();
  float* diff = diff_.mutable_gpu_data();
  math::gpu::Sub(*ctx_, count, bottom[0]->gpu_data(), bottom[1]->gpu_data(), diff);
  GpuLossReduction r;
  r.n = count;
  r.loss = diff;
  r.square = true;
  r.normalizer = static_cast<float>(bottom[0]->shape(0));
  r.divisor = 2.0f;
  r.top = top[0]->mutable_gpu_data();
  ReduceLossGpu(*ctx_, r);
}

void EuclideanLossLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                     const std::vector<bool>& propagate_down,
                                     const std::vector<Tensor*>& bottom) {
  for (int i = 0; i < 2; ++i) {
    if (!propagate_down[i]) continue;
    const int n = bottom[i]->count();
    EuclideanBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
        n, diff_.gpu_data(), top[0]->gpu_diff(), i == 0 ? 1.0f : -1.0f,
        static_cast<float>(bottom[i]->shape(0)), bottom[i]->mutable_gpu_diff());
    CORTADO_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cortado
