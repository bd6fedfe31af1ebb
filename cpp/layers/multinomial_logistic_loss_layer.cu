// SPDX-License-Identifier: Apache-2.0
// MultinomialLogisticLoss on the GPU: the same results as multinomial_logistic_loss_layer.cpp.
// Per-sample losses are summed on the device; the one value read back is the index of the first
// sample with an out-of-range label (-1 when none), so that bad labels throw as on the CPU.
#include "core/cuda.hpp"
#include "layers/loss_reduction.hpp"
#include "layers/multinomial_logistic_loss_layer.hpp"

namespace cortado {
namespace {

constexpr float kLogThreshold = 1e-20f;  // Caffe's kLOG_THRESHOLD

// loss[n] = -log(max(p[n, l_n], threshold)); invalid[n] = -1 (and loss 0) where l_n is outside
// [0, dim).
__global__ void MultinomialSampleLoss(int num, int dim, const float* p, const float* label,
                                      float* loss, float* invalid) {
  CORTADO_KERNEL_LOOP(n, num) {
    const int l = static_cast<int>(label[n]);
    if (l < 0 || l >= dim) {
      loss[n] = 0.0f;
      invalid[n] = -1.0f;
    } else {
      loss[n] = -logf(fmaxf(p[n * dim + l], kLogThreshold));
      invalid[n] = 0.0f;
    }
  }
}

// dp = -w / (N max(p, threshold)) at each sample's label, 0 elsewhere (w a device scalar).
__global__ void MultinomialBackward(int64_t count, int dim, const float* p, const float* label,
                                    const float* top_diff, float num, float* dp) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int64_t n = i / dim;
    if (static_cast<int>(i % dim) == static_cast<int>(label[n])) {
      const float scale = -top_diff[0] / num;
      dp[i] = scale / fmaxf(p[i], kLogThreshold);
    } else {
      dp[i] = 0.0f;
    }
  }
}

}  // namespace

void MultinomialLogisticLossLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                              const std::vector<Tensor*>& top) {
  sample_loss_.Reshape(std::vector<int>{num_});
  sample_invalid_.Reshape(std::vector<int>{num_});
  const float* label = bottom[1]->gpu_data();
  cudaStream_t stream = cuda::Stream(*ctx_);
  MultinomialSampleLoss<<<cuda::Blocks(num_), cuda::kThreads, 0, stream>>>(
      num_, dim_, bottom[0]->gpu_data(), label, sample_loss_.mutable_gpu_data(),
      sample_invalid_.mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
  GpuLossReduction r;
  r.n = num_;
  r.loss = sample_loss_.gpu_data();
  r.count = sample_invalid_.gpu_data();
  r.normalizer = static_cast<float>(num_);
  r.top = top[0]->mutable_gpu_data();
  const int invalid = FirstInvalidIndex(*ctx_, ReduceLossGpu(*ctx_, r));
  if (invalid >= 0) ThrowBadLabel(invalid, ReadDeviceValue(*ctx_, label + invalid));
}

void MultinomialLogisticLossLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                               const std::vector<bool>& propagate_down,
                                               const std::vector<Tensor*>& bottom) {
  CheckLabelBackward(propagate_down);
  if (!propagate_down[0]) return;
  const int64_t count = bottom[0]->count();
  MultinomialBackward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      count, dim_, bottom[0]->gpu_data(), bottom[1]->gpu_data(), top[0]->gpu_diff(),
      static_cast<float>(num_), bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
