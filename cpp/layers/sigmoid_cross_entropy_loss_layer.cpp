// SPDX-License-Identifier: Apache-2.0
#include "layers/sigmoid_cross_entropy_loss_layer.hpp"

#include <algorithm>
#include <cmath>

#include "layers/loss_normalizer.hpp"

namespace cortado {

void SigmoidCrossEntropyLossLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                                         const std::vector<Tensor*>& /*top*/) {
  // Loss layers weigh their loss top by 1 unless told otherwise (Caffe's LossLayer).
  if (param_.loss_weight_size() == 0) param_.add_loss_weight(1.0f);
  const auto& p = param_.loss_param();
  has_ignore_label_ = p.has_ignore_label();
  ignore_label_ = p.ignore_label();
  // Caffe's sigmoid_cross_entropy_loss_layer.cpp keeps its historical BATCH_SIZE default and
  // only uses `normalization` when it is set explicitly.
  if (p.has_normalization()) {
    normalization_ = p.normalization();
  } else if (p.has_normalize()) {
    normalization_ = p.normalize() ? caffe::LossParameter::VALID : caffe::LossParameter::BATCH_SIZE;
  } else {
    normalization_ = caffe::LossParameter::BATCH_SIZE;
  }
}

void SigmoidCrossEntropyLossLayer::Reshape(const std::vector<Tensor*>& bottom,
                                           const std::vector<Tensor*>& top) {
  if (bottom[0]->num_axes() < 1 || bottom[1]->num_axes() < 1 ||
      bottom[0]->shape(0) != bottom[1]->shape(0) || bottom[0]->count() != bottom[1]->count()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: scores and targets must have the same first dimension and the same count, "
                  "got {} and {}",
                  Describe(), bottom[0]->ShapeString(), bottom[1]->ShapeString());
  }
  outer_num_ = bottom[0]->shape(0);
  inner_num_ = bottom[0]->count(1);
  top[0]->Reshape(std::vector<int>{});
}

float SigmoidCrossEntropyLossLayer::Normalizer(int valid_count) const {
  return LossNormalizer(normalization_, outer_num_, inner_num_, valid_count);
}

void SigmoidCrossEntropyLossLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                              const std::vector<Tensor*>& top) {
  const int count = bottom[0]->count();
  const float* x = bottom[0]->cpu_data();
  const float* t = bottom[1]->cpu_data();
  double loss = 0.0;
  int valid_count = 0;
  for (int i = 0; i < count; ++i) {
    if (has_ignore_label_ && static_cast<int>(t[i]) == ignore_label_) continue;
    // -[t log s + (1 - t) log(1 - s)] with s = sigmoid(x), rewritten so that exp only sees
    // -|x|: x (t - [x >= 0]) - log(1 + exp(-|x|)).
    const float positive = x[i] >= 0.0f ? 1.0f : 0.0f;
    loss -= x[i] * (t[i] - positive) - std::log1p(std::exp(x[i] - 2.0f * x[i] * positive));
    ++valid_count;
  }
  normalizer_ = Normalizer(valid_count);
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss) / normalizer_;
}

void SigmoidCrossEntropyLossLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                               const std::vector<bool>& propagate_down,
                                               const std::vector<Tensor*>& bottom) {
  if (propagate_down[1]) {
    CORTADO_THROW(kInvalidArgument, "{} cannot backpropagate to its target input (bottom 1)",
                  Describe());
  }
  if (!propagate_down[0]) return;
  const int count = bottom[0]->count();
  const float* x = bottom[0]->cpu_data();
  const float* t = bottom[1]->cpu_data();
  float* dx = bottom[0]->mutable_cpu_diff();
  const float scale = top[0]->cpu_diff()[0] / normalizer_;
  for (int i = 0; i < count; ++i) {
    if (has_ignore_label_ && static_cast<int>(t[i]) == ignore_label_) {
      dx[i] = 0.0f;
      continue;
    }
    const float s = 1.0f / (1.0f + std::exp(-x[i]));
    dx[i] = (s - t[i]) * scale;
  }
}

CORTADO_REGISTER_LAYER(SigmoidCrossEntropyLoss, SigmoidCrossEntropyLossLayer);

}  // namespace cortado
