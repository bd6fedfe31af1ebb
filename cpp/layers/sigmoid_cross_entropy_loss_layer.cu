// SPDX-License-Identifier: Apache-2.0
// SigmoidCrossEntropyLoss on the GPU: the same results as sigmoid_cross_entropy_loss_layer.cpp.
// Per-element losses go to a device buffer and are reduced there; the normalizer stays on the
// device for Backward, so neither pass reads anything back to the host.
#include "core/cuda.hpp"
#include "layers/loss_normalizer.hpp"
#include "layers/loss_reduction.hpp"
#include "layers/sigmoid_cross_entropy_loss_layer.hpp"

namespace cortado {
namespace {

// loss[i] = -[x (t - [x >= 0]) - log(1 + exp(x - 2 x [x >= 0]))], 0 where ignored; count[i]
// (when wanted) 1 for a counted element, 0 for an ignored one.
__global__ void SigmoidCrossEntropyElementLoss(int n, const float* x, const float* t,
                                               bool has_ignore, int ignore, float* loss,
                                               float* count) {
  CORTADO_KERNEL_LOOP(i, n) {
    const bool ignored = has_ignore && static_cast<int>(t[i]) == ignore;
    float value = 0.0f;
    if (!ignored) {
      const float positive = x[i] >= 0.0f ? 1.0f : 0.0f;
      value = -(x[i] * (t[i] - positive) - log1pf(expf(x[i] - 2.0f * x[i] * positive)));
    }
    loss[i] = value;
    if (count != nullptr) count[i] = ignored ? 0.0f : 1.0f;
  }
}

// dx = (sigmoid(x) - t) * w / normalizer, 0 where ignored; w and the normalizer are device
// scalars.
__global__ void SigmoidCrossEntropyBackward(int n, const float* x, const float* t, bool has_ignore,
                                            int ignore, const float* top_diff,
                                            const float* normalizer, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) {
    if (has_ignore && static_cast<int>(t[i]) == ignore) {
      dx[i] = 0.0f;
    } else {
      const float scale = top_diff[0] / normalizer[0];
      const float s = 1.0f / (1.0f + expf(-x[i]));
      dx[i] = (s - t[i]) * scale;
    }
  }
}

}  // namespace

void SigmoidCrossEntropyLossLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                              const std::vector<Tensor*>& top) {
  const int count = bottom[0]->count();
  const bool valid = normalization_ == caffe::LossParameter::VALID;
  element_loss_.ReshapeLike(*bottom[0]);
  if (valid) element_count_.ReshapeLike(*bottom[0]);
  normalizer_gpu_.Reshape(std::vector<int>{});
  float* loss = element_loss_.mutable_gpu_data();
  float* counted = valid ? element_count_.mutable_gpu_data() : nullptr;
  SigmoidCrossEntropyElementLoss<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      count, bottom[0]->gpu_data(), bottom[1]->gpu_data(), has_ignore_label_, ignore_label_, loss,
      counted);
  CORTADO_CUDA_CHECK_LAUNCH();
  GpuLossReduction r;
  r.n = count;
  r.loss = loss;
  r.count = counted;
  r.count_normalizes = valid;
  r.normalizer = valid ? 1.0f : Normalizer(-1);
  r.top = top[0]->mutable_gpu_data();
  r.normalizer_out = normalizer_gpu_.mutable_gpu_data();
  ReduceLossGpu(*ctx_, r);
}

void SigmoidCrossEntropyLossLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                               const std::vector<bool>& propagate_down,
                                               const std::vector<Tensor*>& bottom) {
  if (propagate_down[1]) {
    CORTADO_THROW(kInvalidArgument, "{} cannot backpropagate to its target input (bottom 1)",
                  Describe());
  }
  if (!propagate_down[0]) return;
  const int count = bottom[0]->count();
  SigmoidCrossEntropyBackward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      count, bottom[0]->gpu_data(), bottom[1]->gpu_data(), has_ignore_label_, ignore_label_,
      top[0]->gpu_diff(), normalizer_gpu_.gpu_data(), bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
