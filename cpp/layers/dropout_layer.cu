// SPDX-License-Identifier: Apache-2.0
// Dropout on the GPU: the rules of dropout_layer.cpp with the mask drawn on the device (uniform
// numbers from the context's Philox generator, kept where the draw is >= dropout_ratio), so a
// reseeded context repeats it; Backward reuses the draws of the last train-time Forward.
#include "core/cuda.hpp"
#include "layers/dropout_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void DropoutApply(int n, const float* in, const float* rand, float ratio, float scale,
                             float* out) {
  CORTADO_KERNEL_LOOP(i, n) out[i] = rand[i] >= ratio ? in[i] * scale : 0.0f;
}

}  // namespace

void DropoutLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const float* x = bottom[0]->gpu_data();
  float* y = top[0]->mutable_gpu_data();
  if (phase() != caffe::TRAIN) {
    if (test_scale_ == 1.0f) {
      math::gpu::Copy(*ctx_, n, x, y);  // nothing to do in place
    } else {
      math::gpu::Scale(*ctx_, n, test_scale_, x, y);
    }
    return;
  }
  float* rand = rand_.mutable_gpu_data();
  math::gpu::RngUniform(*ctx_, n, 0.0f, 1.0f, rand);
  DropoutApply<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(n, x, rand, ratio_,
                                                                            train_scale_, y);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void DropoutLayer::BackwardGpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* dy = top[0]->gpu_diff();
  float* dx = bottom[0]->mutable_gpu_diff();
  if (phase() != caffe::TRAIN) {
    if (test_scale_ == 1.0f) {
      math::gpu::Copy(*ctx_, n, dy, dx);
    } else {
      math::gpu::Scale(*ctx_, n, test_scale_, dy, dx);
    }
    return;
  }
  DropoutApply<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, dy, rand_.gpu_data(), ratio_, train_scale_, dx);
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
