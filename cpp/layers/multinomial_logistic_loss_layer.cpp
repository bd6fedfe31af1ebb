// SPDX-License-Identifier: Apache-2.0
#include "layers/multinomial_logistic_loss_layer.hpp"

#include <algorithm>
#include <cmath>

#include "math/math.hpp"

namespace cortado {
namespace {

// Caffe's kLOG_THRESHOLD (loss_layer.hpp): probabilities are clamped to it before the log.
constexpr float kLogThreshold = 1e-20f;

}  // namespace

void MultinomialLogisticLossLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                                         const std::vector<Tensor*>& /*top*/) {
  // Loss layers weigh their loss top by 1 unless told otherwise (Caffe's LossLayer).
  if (param_.loss_weight_size() == 0) param_.add_loss_weight(1.0f);
}

void MultinomialLogisticLossLayer::Reshape(const std::vector<Tensor*>& bottom,
                                           const std::vector<Tensor*>& top) {
  if (bottom[0]->num_axes() < 1 || bottom[1]->num_axes() < 1 ||
      bottom[0]->shape(0) != bottom[1]->shape(0) || bottom[1]->count() != bottom[1]->shape(0)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: probabilities ({}) and labels ({}) must have the same first dimension N, "
                  "with one label per sample (N or N x 1 x 1 x 1)",
                  Describe(), bottom[0]->ShapeString(), bottom[1]->ShapeString());
  }
  if (bottom[0]->shape(0) == 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: probabilities of shape {} hold no sample; the loss needs one", Describe(),
                  bottom[0]->ShapeString());
  }
  num_ = bottom[0]->shape(0);
  dim_ = bottom[0]->count(1);
  top[0]->Reshape(std::vector<int>{});
}

void MultinomialLogisticLossLayer::ThrowBadLabel(int sample, float value) const {
  CORTADO_THROW(kInvalidArgument, "{}: label value {} of sample {} is outside [0, {})", Describe(),
                static_cast<int>(value), sample, dim_);
}

void MultinomialLogisticLossLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                              const std::vector<Tensor*>& top) {
  const float* p = bottom[0]->cpu_data();
  const float* label = bottom[1]->cpu_data();
  double loss = 0.0;
  for (int n = 0; n < num_; ++n) {
    const int l = static_cast<int>(label[n]);
    if (l < 0 || l >= dim_) ThrowBadLabel(n, label[n]);
    loss -= std::log(std::max(p[static_cast<int64_t>(n) * dim_ + l], kLogThreshold));
  }
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss) / static_cast<float>(num_);
}

void MultinomialLogisticLossLayer::CheckLabelBackward(
    const std::vector<bool>& propagate_down) const {
  if (propagate_down[1]) {
    CORTADO_THROW(kInvalidArgument, "{} cannot backpropagate to its label input (bottom 1)",
                  Describe());
  }
}

void MultinomialLogisticLossLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                               const std::vector<bool>& propagate_down,
                                               const std::vector<Tensor*>& bottom) {
  CheckLabelBackward(propagate_down);
  if (!propagate_down[0]) return;
  // Labels were checked against [0, K) by Forward.
  const float* p = bottom[0]->cpu_data();
  const float* label = bottom[1]->cpu_data();
  float* dp = bottom[0]->mutable_cpu_diff();
  math::Set(bottom[0]->count(), 0.0f, dp);
  const float scale = -top[0]->cpu_diff()[0] / static_cast<float>(num_);
  for (int n = 0; n < num_; ++n) {
    const int64_t i = static_cast<int64_t>(n) * dim_ + static_cast<int>(label[n]);
    dp[i] = scale / std::max(p[i], kLogThreshold);
  }
}

CORTADO_REGISTER_LAYER(MultinomialLogisticLoss, MultinomialLogisticLossLayer);

}  // namespace cortado
