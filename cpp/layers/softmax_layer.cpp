// SPDX-License-Identifier: Apache-2.0
#include "layers/softmax_layer.hpp"

#include <algorithm>
#include <cmath>

#include "math/math.hpp"

namespace cortado {

void SoftmaxLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int axis = bottom[0]->CanonicalAxisIndex(param_.softmax_param().axis());
  outer_num_ = bottom[0]->count(0, axis);
  channels_ = bottom[0]->shape(axis);
  inner_num_ = bottom[0]->count(axis + 1);
  top[0]->ReshapeLike(*bottom[0]);
  scratch_.resize(inner_num_);
}

void SoftmaxLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const float* in = bottom[0]->cpu_data();
  float* out = top[0]->mutable_cpu_data();
  if (in != out) math::Copy(bottom[0]->count(), in, out);
  float* scratch = scratch_.data();
  const int dim = channels_ * inner_num_;
  for (int i = 0; i < outer_num_; ++i) {
    float* x = out + i * dim;
    // Subtract the per-position maximum so exp never overflows (as Caffe does).
    std::copy(x, x + inner_num_, scratch);
    for (int c = 1; c < channels_; ++c) {
      const float* row = x + c * inner_num_;
      for (int k = 0; k < inner_num_; ++k) scratch[k] = std::max(scratch[k], row[k]);
    }
    for (int c = 0; c < channels_; ++c) {
      float* row = x + c * inner_num_;
      for (int k = 0; k < inner_num_; ++k) row[k] = std::exp(row[k] - scratch[k]);
    }
    std::fill(scratch, scratch + inner_num_, 0.0f);
    for (int c = 0; c < channels_; ++c) {
      const float* row = x + c * inner_num_;
      for (int k = 0; k < inner_num_; ++k) scratch[k] += row[k];
    }
    for (int c = 0; c < channels_; ++c) {
      float* row = x + c * inner_num_;
      for (int k = 0; k < inner_num_; ++k) row[k] /= scratch[k];
    }
  }
}

void SoftmaxLayer::BackwardCpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  // dx = y * (dy - sum_c(dy * y)), per position.
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  float* scratch = scratch_.data();
  const int dim = channels_ * inner_num_;
  for (int i = 0; i < outer_num_; ++i) {
    const int base = i * dim;
    std::fill(scratch, scratch + inner_num_, 0.0f);
    for (int c = 0; c < channels_; ++c) {
      const int off = base + c * inner_num_;
      for (int k = 0; k < inner_num_; ++k) scratch[k] += dy[off + k] * y[off + k];
    }
    for (int c = 0; c < channels_; ++c) {
      const int off = base + c * inner_num_;
      for (int k = 0; k < inner_num_; ++k) dx[off + k] = y[off + k] * (dy[off + k] - scratch[k]);
    }
  }
}

CORTADO_REGISTER_LAYER(Softmax, SoftmaxLayer);

}  // namespace cortado
