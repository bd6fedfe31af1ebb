// SPDX-License-Identifier: Apache-2.0
#include "layers/contrastive_loss_layer.hpp"

#include <algorithm>
#include <cmath>

#include "math/math.hpp"

namespace cortado {
namespace {

// Whether every axis of `t` after the first `keep` ones is 1.
bool TrailingOnes(const Tensor& t, int keep) {
  for (int i = keep; i < t.num_axes(); ++i) {
    if (t.shape(i) != 1) return false;
  }
  return true;
}

}  // namespace

void ContrastiveLossLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                                 const std::vector<Tensor*>& /*top*/) {
  // Loss layers weigh their loss top by 1 unless told otherwise (Caffe's LossLayer).
  if (param_.loss_weight_size() == 0) param_.add_loss_weight(1.0f);
}

void ContrastiveLossLayer::Reshape(const std::vector<Tensor*>& bottom,
                                   const std::vector<Tensor*>& top) {
  const Tensor& a = *bottom[0];
  const Tensor& b = *bottom[1];
  const Tensor& y = *bottom[2];
  if (a.num_axes() < 1 || b.num_axes() < 1 || a.shape(0) != b.shape(0) ||
      a.count(1) != b.count(1) || !TrailingOnes(a, 2) || !TrailingOnes(b, 2)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the inputs a and b must both be N x C (or N x C x 1 x 1) with the same N "
                  "and C, got {} and {}",
                  Describe(), a.ShapeString(), b.ShapeString());
  }
  if (y.num_axes() < 1 || y.shape(0) != a.shape(0) || y.count() != a.shape(0)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the similarity labels (bottom 2) must hold one value per pair, N = {}, "
                  "got shape {}",
                  Describe(), a.shape(0), y.ShapeString());
  }
  if (a.shape(0) == 0) {
    // The loss is a mean over the pairs: with none it would be 0 / 0.
    CORTADO_THROW(kInvalidArgument, "{}: inputs of shape {} hold no pair; the loss needs one",
                  Describe(), a.ShapeString());
  }
  num_ = a.shape(0);
  channels_ = a.count(1);
  diff_.Reshape(std::vector<int>{num_, channels_});
  dist_sq_.Reshape(std::vector<int>{num_});
  top[0]->Reshape(std::vector<int>{});
}

void ContrastiveLossLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                      const std::vector<Tensor*>& top) {
  const auto& p = param_.contrastive_loss_param();
  const float margin = p.margin();
  float* diff = diff_.mutable_cpu_data();
  math::Sub(diff_.count(), bottom[0]->cpu_data(), bottom[1]->cpu_data(), diff);
  float* dist_sq = dist_sq_.mutable_cpu_data();
  const float* y = bottom[2]->cpu_data();
  double loss = 0.0;
  for (int n = 0; n < num_; ++n) {
    const float* row = diff + static_cast<int64_t>(n) * channels_;
    dist_sq[n] = math::Dot(channels_, row, row);
    if (static_cast<int>(y[n]) != 0) {
      loss += dist_sq[n];
    } else if (p.legacy_version()) {
      loss += std::max(margin - dist_sq[n], 0.0f);
    } else {
      const float gap = std::max(margin - std::sqrt(dist_sq[n]), 0.0f);
      loss += gap * gap;
    }
  }
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss) / static_cast<float>(num_) / 2.0f;
}

void ContrastiveLossLayer::CheckLabelBackward(const std::vector<bool>& propagate_down) const {
  if (propagate_down[2]) {
    CORTADO_THROW(kInvalidArgument,
                  "{} cannot backpropagate to its similarity label input (bottom 2)", Describe());
  }
}

void ContrastiveLossLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                       const std::vector<bool>& propagate_down,
                                       const std::vector<Tensor*>& bottom) {
  CheckLabelBackward(propagate_down);
  const auto& p = param_.contrastive_loss_param();
  const float margin = p.margin();
  const float* diff = diff_.cpu_data();
  const float* dist_sq = dist_sq_.cpu_data();
  const float* y = bottom[2]->cpu_data();
  for (int i = 0; i < 2; ++i) {
    if (!propagate_down[i]) continue;
    const float alpha = (i == 0 ? 1.0f : -1.0f) * top[0]->cpu_diff()[0] / static_cast<float>(num_);
    float* dx = bottom[i]->mutable_cpu_diff();
    for (int n = 0; n < num_; ++n) {
      const int64_t offset = static_cast<int64_t>(n) * channels_;
      // dx = scale * (a - b) for this pair (see the header for the cases).
      float scale = 0.0f;
      if (static_cast<int>(y[n]) != 0) {
        scale = alpha;
      } else if (p.legacy_version()) {
        if (margin - dist_sq[n] > 0.0f) scale = -alpha;
      } else {
        const float dist = std::sqrt(dist_sq[n]);
        const float gap = margin - dist;
        if (gap > 0.0f) scale = -alpha * gap / (dist + 1e-4f);
      }
      for (int c = 0; c < channels_; ++c) dx[offset + c] = scale * diff[offset + c];
    }
  }
}

CORTADO_REGISTER_LAYER(ContrastiveLoss, ContrastiveLossLayer);

}  // namespace cortado
