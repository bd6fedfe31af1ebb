// SPDX-License-Identifier: Apache-2.0
#include "layers/hinge_loss_layer.hpp"

#include <algorithm>

namespace cortado {

void HingeLossLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                           const std::vector<Tensor*>& /*top*/) {
  // Loss layers weigh their loss top by 1 unless told otherwise (Caffe's LossLayer).
  if (param_.loss_weight_size() == 0) param_.add_loss_weight(1.0f);
}

void HingeLossLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (bottom[0]->num_axes() < 1 || bottom[1]->num_axes() < 1 ||
      bottom[0]->shape(0) != bottom[1]->shape(0) || bottom[1]->count() != bottom[1]->shape(0)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: scores ({}) and labels ({}) must have the same first dimension N, with one "
                  "label per sample",
                  Describe(), bottom[0]->ShapeString(), bottom[1]->ShapeString());
  }
  if (bottom[0]->shape(0) == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: scores of shape {} hold no sample; the loss needs one",
                  Describe(), bottom[0]->ShapeString());
  }
  num_ = bottom[0]->shape(0);
  dim_ = bottom[0]->count(1);
  margin_.ReshapeLike(*bottom[0]);
  top[0]->Reshape(std::vector<int>{});
}

void HingeLossLayer::ThrowBadLabel(int sample, float value) const {
  CORTADO_THROW(kInvalidArgument, "{}: label value {} of sample {} is outside [0, {})", Describe(),
                static_cast<int>(value), sample, dim_);
}

void HingeLossLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  const float* x = bottom[0]->cpu_data();
  const float* label = bottom[1]->cpu_data();
  float* m = margin_.mutable_cpu_data();
  const bool l2 = IsL2();
  double loss = 0.0;
  for (int n = 0; n < num_; ++n) {
    const int l = static_cast<int>(label[n]);
    if (l < 0 || l >= dim_) ThrowBadLabel(n, label[n]);
    for (int k = 0; k < dim_; ++k) {
      const int64_t i = static_cast<int64_t>(n) * dim_ + k;
      const float t = k == l ? -1.0f : 1.0f;
      m[i] = std::max(0.0f, 1.0f + t * x[i]);
      loss += l2 ? static_cast<double>(m[i]) * m[i] : m[i];
    }
  }
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss) / static_cast<float>(num_);
}

void HingeLossLayer::CheckLabelBackward(const std::vector<bool>& propagate_down) const {
  if (propagate_down[1]) {
    CORTADO_THROW(kInvalidArgument, "{} cannot backpropagate to its label input (bottom 1)",
                  Describe());
  }
}

void HingeLossLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  CheckLabelBackward(propagate_down);
  if (!propagate_down[0]) return;
  // Labels were checked against [0, K) by Forward.
  const float* label = bottom[1]->cpu_data();
  const float* m = margin_.cpu_data();
  float* dx = bottom[0]->mutable_cpu_diff();
  const bool l2 = IsL2();
  const float scale = (l2 ? 2.0f : 1.0f) * top[0]->cpu_diff()[0] / static_cast<float>(num_);
  for (int n = 0; n < num_; ++n) {
    const int l = static_cast<int>(label[n]);
    for (int k = 0; k < dim_; ++k) {
      const int64_t i = static_cast<int64_t>(n) * dim_ + k;
      // m >= 0, so sign(m) is 1 or 0.
      const float g = l2 ? m[i] : (m[i] > 0.0f ? 1.0f : 0.0f);
      dx[i] = (k == l ? -g : g) * scale;
    }
  }
}

CORTADO_REGISTER_LAYER(HingeLoss, HingeLossLayer);

}  // namespace cortado
