// SPDX-License-Identifier: Apache-2.0
// ContrastiveLoss on the GPU: the same results as contrastive_loss_layer.cpp. Each pair's
// squared distance and loss term are computed by one thread, summed on the device and written
// to the loss top there; Backward reads the loss weight from the top's diff on the device.
#include "core/cuda.hpp"
#include "layers/contrastive_loss_layer.hpp"
#include "layers/loss_reduction.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

// Per pair n: dist_sq[n] = sum_c diff[n, c]^2 and its term of the loss sum.
__global__ void ContrastivePairLoss(int num, int channels, const float* diff, const float* y,
                                    float margin, bool legacy, float* dist_sq, float* loss) {
  CORTADO_KERNEL_LOOP(n, num) {
    const float* row = diff + n * channels;
    float sum = 0.0f;
    for (int c = 0; c < channels; ++c) sum += row[c] * row[c];
    dist_sq[n] = sum;
    if (static_cast<int>(y[n]) != 0) {
      loss[n] = sum;
    } else if (legacy) {
      loss[n] = fmaxf(margin - sum, 0.0f);
    } else {
      const float gap = fmaxf(margin - sqrtf(sum), 0.0f);
      loss[n] = gap * gap;
    }
  }
}

// dx = scale * diff per element, scale as in contrastive_loss_layer.cpp; alpha = sign * w / N
// with w the loss top's diff (a device scalar).
__global__ void ContrastiveBackward(int64_t count, int channels, const float* diff,
                                    const float* dist_sq, const float* y, float margin, bool legacy,
                                    const float* top_diff, float sign, float num, float* dx) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int64_t n = i / channels;
    const float alpha = sign * top_diff[0] / num;
    float scale = 0.0f;
    if (static_cast<int>(y[n]) != 0) {
      scale = alpha;
    } else if (legacy) {
      if (margin - dist_sq[n] > 0.0f) scale = -alpha;
    } else {
      const float dist = sqrtf(dist_sq[n]);
      const float gap = margin - dist;
      if (gap > 0.0f) scale = -alpha * gap / (dist + 1e-4f);
    }
    dx[i] = scale * diff[i];
  }
}

}  // namespace

void ContrastiveLossLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                      const std::vector<Tensor*>& top) {
  const auto& p = param_.contrastive_loss_param();
  math::gpu::Sub(*ctx_, diff_.count(), bottom[0]->gpu_data(), bottom[1]->gpu_data(),
                 diff_.mutable_gpu_data());
  pair_loss_.Reshape(std::vector<int>{num_});
  ContrastivePairLoss<<<cuda::Blocks(num_), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      num_, channels_, diff_.gpu_data(), bottom[2]->gpu_data(), p.margin(), p.legacy_version(),
      dist_sq_.mutable_gpu_data(), pair_loss_.mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
  GpuLossReduction r;
  r.n = num_;
  r.loss = pair_loss_.gpu_data();
  r.normalizer = static_cast<float>(num_);
  r.divisor = 2.0f;
  r.top = top[0]->mutable_gpu_data();
  ReduceLossGpu(*ctx_, r);
}

void ContrastiveLossLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                       const std::vector<bool>& propagate_down,
                                       const std::vector<Tensor*>& bottom) {
  CheckLabelBackward(propagate_down);
  const auto& p = param_.contrastive_loss_param();
  const int64_t count = diff_.count();
  for (int i = 0; i < 2; ++i) {
    if (!propagate_down[i]) continue;
    ContrastiveBackward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
        count, channels_, diff_.gpu_data(), dist_sq_.gpu_data(), bottom[2]->gpu_data(), p.margin(),
        p.legacy_version(), top[0]->gpu_diff(), i == 0 ? 1.0f : -1.0f, static_cast<float>(num_),
        bottom[i]->mutable_gpu_diff());
    CORTADO_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cortado
