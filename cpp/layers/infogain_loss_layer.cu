// SPDX-License-Identifier: Apache-2.0
// InfogainLoss on the GPU: the same results as infogain_loss_layer.cpp (Caffe has CPU passes
// only). The internal Softmax runs on the device; per-position losses are reduced there and the
// normalizer stays on the device for Backward. The one value read back is the index of the
// first out-of-range label (-1 when none), so that bad labels throw as on the CPU.
#include <cstdint>

#include "core/cuda.hpp"
#include "layers/infogain_loss_layer.hpp"
#include "layers/loss_normalizer.hpp"
#include "layers/loss_reduction.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

constexpr float kLogThreshold = 1e-20f;  // Caffe's kLOG_THRESHOLD

// Position p = i * inner + j: loss -sum_c H[label, c] log(max(prob[i, c, j], threshold)) and
// count 1; an ignored position gets 0 and 0, one with a label outside [0, k) 0 and -1.
__global__ void InfogainPerPosition(int positions, const float* prob, const float* labels,
                                    const float* h, int k, int inner, bool has_ignore, int ignore,
                                    float* loss, float* count) {
  CORTADO_KERNEL_LOOP(p, positions) {
    const int label = static_cast<int>(labels[p]);
    if (has_ignore && label == ignore) {
      loss[p] = 0.0f;
      count[p] = 0.0f;
    } else if (label < 0 || label >= k) {
      loss[p] = 0.0f;
      count[p] = -1.0f;
    } else {
      const int64_t i = p / inner, j = p % inner;
      const float* row = h + static_cast<int64_t>(label) * k;
      const float* q = prob + i * k * inner + j;
      float sum = 0.0f;
      for (int c = 0; c < k; ++c) sum -= row[c] * logf(fmaxf(q[c * inner], kLogThreshold));
      loss[p] = sum;
      count[p] = 1.0f;
    }
  }
}

// sum_rows[r] = sum_c H[r, c].
__global__ void InfogainRowSums(int k, const float* h, float* sum_rows) {
  CORTADO_KERNEL_LOOP(r, k) {
    float sum = 0.0f;
    for (int c = 0; c < k; ++c) sum += h[r * k + c];
    sum_rows[r] = sum;
  }
}

// dx = (p sum_rows[label] - H[label, c]) * w / normalizer, 0 at ignored positions; w and the
// normalizer are device scalars.
__global__ void InfogainBackward(int64_t n, const float* prob, const float* labels, const float* h,
                                 const float* sum_rows, int k, int inner, bool has_ignore,
                                 int ignore, const float* top_diff, const float* normalizer,
                                 float* dx) {
  CORTADO_KERNEL_LOOP(idx, n) {
    const int64_t j = idx % inner;
    const int64_t c = (idx / inner) % k;
    const int64_t i = idx / (static_cast<int64_t>(inner) * k);
    const int label = static_cast<int>(labels[i * inner + j]);
    if (has_ignore && label == ignore) {
      dx[idx] = 0.0f;
    } else {
      const float value = prob[idx] * sum_rows[label] - h[static_cast<int64_t>(label) * k + c];
      dx[idx] = value * (top_diff[0] / normalizer[0]);
    }
  }
}

}  // namespace

void InfogainLossLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                   const std::vector<Tensor*>& top) {
  softmax_->Forward({bottom[0]}, {&prob_});
  const int positions = outer_num_ * inner_num_;
  position_loss_.Reshape(std::vector<int>{positions});
  position_count_.Reshape(std::vector<int>{positions});
  normalizer_gpu_.Reshape(std::vector<int>{});
  const float* labels = bottom[1]->gpu_data();
  cudaStream_t stream = cuda::Stream(*ctx_);
  InfogainPerPosition<<<cuda::Blocks(positions), cuda::kThreads, 0, stream>>>(
      positions, prob_.gpu_data(), labels, Infogain(bottom).gpu_data(), num_labels_, inner_num_,
      has_ignore_label_, ignore_label_, position_loss_.mutable_gpu_data(),
      position_count_.mutable_gpu_data());
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
    ThrowBadLabel(static_cast<int>(ReadDeviceValue(*ctx_, labels + invalid)), invalid);
  }
  if (top.size() == 2) {
    math::gpu::Copy(*ctx_, prob_.count(), prob_.gpu_data(), top[1]->mutable_gpu_data());
  }
}

void InfogainLossLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                    const std::vector<bool>& propagate_down,
                                    const std::vector<Tensor*>& bottom) {
  CheckBackward(propagate_down);
  if (!propagate_down[0]) return;
  // Labels were checked against [0, K) by Forward; H's row sums are taken afresh (it may be an
  // input that changed).
  cudaStream_t stream = cuda::Stream(*ctx_);
  const float* h = Infogain(bottom).gpu_data();
  InfogainRowSums<<<cuda::Blocks(num_labels_), cuda::kThreads, 0, stream>>>(
      num_labels_, h, sum_rows_h_.mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
  const int64_t n = prob_.count();
  InfogainBackward<<<cuda::Blocks(n), cuda::kThreads, 0, stream>>>(
      n, prob_.gpu_data(), bottom[1]->gpu_data(), h, sum_rows_h_.gpu_data(), num_labels_,
      inner_num_, has_ignore_label_, ignore_label_, top[0]->gpu_diff(), normalizer_gpu_.gpu_data(),
      bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
