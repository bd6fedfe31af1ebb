// SPDX-License-Identifier: Apache-2.0
// SoftmaxWithLoss on the GPU: the same results as softmax_with_loss_layer.cpp. The internal
// Softmax runs on the device; per-position losses go to a device buffer and are reduced there,
// and the normalizer stays on the device for Backward. The one value read back is the index
// of the first out-of-range label (-1 when none), so that bad labels throw as on the CPU.
#include <cfloat>
#include <cstdint>

#include "core/cuda.hpp"
#include "layers/loss_normalizer.hpp"
#include "layers/loss_reduction.hpp"
#include "layers/softmax_with_loss_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

// Position p = i * inner + j: loss -log(max(prob[i, label, j], FLT_MIN)) and count 1; an ignored
// position gets 0 and 0, one with a label outside [0, classes) 0 and -1.
__global__ void SoftmaxLossPerPosition(int positions, const float* prob, const float* labels,
                                       int classes, int inner, bool has_ignore, int ignore,
                                       float* loss, float* count) {
  CORTADO_KERNEL_LOOP(p, positions) {
    const int label = static_cast<int>(labels[p]);
    if (has_ignore && label == ignore) {
      loss[p] = 0.0f;
      count[p] = 0.0f;
    } else if (label < 0 || label >= classes) {
      loss[p] = 0.0f;
      count[p] = -1.0f;
    } else {
      const int64_t i = p / inner, j = p % inner;
      const float q = prob[(i * classes + label) * inner + j];
      loss[p] = -logf(fmaxf(q, FLT_MIN));
      count[p] = 1.0f;
    }
  }
}

// dx = (p - onehot(label)) * w / normalizer, 0 at ignored positions; w and the normalizer are
// device scalars.
__global__ void SoftmaxLossBackward(int64_t n, const float* prob, const float* labels, int classes,
                                    int inner, bool has_ignore, int ignore, const float* top_diff,
                                    const float* normalizer, float* dx) {
  CORTADO_KERNEL_LOOP(idx, n) {
    const int64_t j = idx % inner;
    const int64_t c = (idx / inner) % classes;
    const int64_t i = idx / (static_cast<int64_t>(inner) * classes);
    const int label = static_cast<int>(labels[i * inner + j]);
    if (has_ignore && label == ignore) {
      dx[idx] = 0.0f;
    } else {
      const float alpha = top_diff[0] / normalizer[0];
      float value = prob[idx];
      if (c == label) value -= 1.0f;
      dx[idx] = value * alpha;
    }
  }
}

}  // namespace

void SoftmaxWithLossLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                      const std::vector<Tensor*>& top) {
  softmax_->Forward({bottom[0]}, {&prob_});
  const int positions = outer_num_ * inner_num_;
  position_loss_.Reshape(std::vector<int>{positions});
  position_count_.Reshape(std::vector<int>{positions});
  normalizer_gpu_.Reshape(std::vector<int>{});
  const float* labels = bottom[1]->gpu_data();
  cudaStream_t stream = cuda::Stream(*ctx_);
  SoftmaxLossPerPosition<<<cuda::Blocks(positions), cuda::kThreads, 0, stream>>>(
      positions, prob_.gpu_data(), labels, classes_, inner_num_, has_ignore_label_, ignore_label_,
      position_loss_.mutable_gpu_data(), position_count_.mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
  const bool valid = normalization_ == caffe::LossParameter::VALID;
  GpuLossReduction r;
  r.n = positions;
  r.loss = position_loss_.gpu_data();
  r.count = position_count_.gpu_data();
  r.count_normalizes = valid;
  r.normalizer = valid ? 1.0f : Normalizer(-1);
  r.top = top[0]->mutable_gpu_data();
  r.normalizer_out = normalizer_gpu_.mutable_gpu_data();
  const int invalid = FirstInvalidIndex(*ctx_, ReduceLossGpu(*ctx_, r));
  if (invalid >= 0) {
    CORTADO_THROW(kInvalidArgument, "{}: label value {} at position {} is outside [0, {})",
                  Describe(), static_cast<int>(ReadDeviceValue(*ctx_, labels + invalid)), invalid,
                  classes_);
  }
  if (top.size() == 2) {
    math::gpu::Copy(*ctx_, prob_.count(), prob_.gpu_data(), top[1]->mutable_gpu_data());
  }
}

void SoftmaxWithLossLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                       const std::vector<bool>& propagate_down,
                                       const std::vector<Tensor*>& bottom) {
  if (propagate_down[1]) {
    CORTADO_THROW(kInvalidArgument, "{} cannot backpropagate to its label input (bottom 1)",
                  Describe());
  }
  if (!propagate_down[0]) return;
  // Labels were checked against [0, classes) by Forward.
  const int64_t n = prob_.count();
  SoftmaxLossBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, prob_.gpu_data(), bottom[1]->gpu_data(), classes_, inner_num_, has_ignore_label_,
      ignore_label_, top[0]->gpu_diff(), normalizer_gpu_.gpu_data(), bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
