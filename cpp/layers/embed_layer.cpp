// SPDX-License-Identifier: Apache-2.0
#include "layers/embed_layer.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "layers/filler.hpp"
#include "math/math.hpp"

namespace cortado {

namespace {

// An index is valid when it is an integer in [0, k) (NaN is not).
bool ValidIndex(float value, int k) {
  return value >= 0.0f && value < static_cast<float>(k) && std::floor(value) == value;
}

}  // namespace

void EmbedLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                       const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.embed_param();
  if (p.num_output() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: embed_param.num_output must be positive", Describe());
  }
  if (p.input_dim() == 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: embed_param.input_dim (the number of distinct indices) must be positive",
                  Describe());
  }
  if (static_cast<uint64_t>(p.num_output()) * p.input_dim() > INT32_MAX) {
    CORTADO_THROW(kInvalidArgument, "{}: a table of input_dim {} x num_output {} is too large",
                  Describe(), p.input_dim(), p.num_output());
  }
  n_ = static_cast<int>(p.num_output());
  k_ = static_cast<int>(p.input_dim());
  bias_term_ = p.bias_term();
  if (!blobs_.empty()) return;  // weights given already (copied from a model)
  blobs_.push_back(std::make_shared<Tensor>(std::vector<int>{k_, n_}));
  Fill(p.weight_filler(), ctx_->rng(), blobs_[0].get());
  if (bias_term_) {
    blobs_.push_back(std::make_shared<Tensor>(std::vector<int>{n_}));
    Fill(p.bias_filler(), ctx_->rng(), blobs_[1].get());
  }
}

void EmbedLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (bottom[0] == top[0]) {
    CORTADO_THROW(kInvalidArgument, "{}: cannot run in place (top and bottom are one tensor)",
                  Describe());
  }
  // Check against the blobs rather than the params, so weights loaded from a model are checked.
  const Tensor& weights = *blobs_[0];
  if (weights.num_axes() != 2 || weights.shape(0) != k_ || weights.shape(1) != n_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the weights have shape {}, expected {} {} (input_dim x num_output)",
                  Describe(), weights.ShapeString(), k_, n_);
  }
  if (bias_term_ && (blobs_.size() < 2 || blobs_[1]->count() != n_)) {
    CORTADO_THROW(kInvalidArgument, "{}: the bias has shape {}, expected {} for num_output {}",
                  Describe(), blobs_.size() < 2 ? std::string("(none)") : blobs_[1]->ShapeString(),
                  n_, n_);
  }
  m_ = bottom[0]->count();
  std::vector<int> top_shape = bottom[0]->shape();
  top_shape.push_back(n_);
  top[0]->Reshape(top_shape);
}

void EmbedLayer::ThrowBadIndex(float value, int position) const {
  CORTADO_THROW(kInvalidArgument,
                "{}: bottom value {} at position {} is not an index: it must be an integer in "
                "[0, {}) (embed_param.input_dim)",
                Describe(), value, position, k_);
}

void EmbedLayer::RefuseBottomGradient(const std::vector<bool>& propagate_down) const {
  if (!propagate_down.empty() && propagate_down[0]) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: cannot backpropagate to the bottom: it holds indices, which have no "
                  "gradient (as in Caffe)",
                  Describe());
  }
}

void EmbedLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const float* x = bottom[0]->cpu_data();
  for (int i = 0; i < m_; ++i) {
    if (!ValidIndex(x[i], k_)) ThrowBadIndex(x[i], i);
  }
  const float* w = blobs_[0]->cpu_data();
  const float* b = bias_term_ ? blobs_[1]->cpu_data() : nullptr;
  float* y = top[0]->mutable_cpu_data();
  const int n = n_;
#pragma omp parallel for if (static_cast <int64_t>(m_) * n_ > math::kParallelThreshold) \
    schedule(static)
  for (int i = 0; i < m_; ++i) {
    const float* row = w + static_cast<size_t>(x[i]) * n;
    float* out = y + static_cast<size_t>(i) * n;
    if (b != nullptr) {
      for (int d = 0; d < n; ++d) out[d] = row[d] + b[d];
    } else {
      for (int d = 0; d < n; ++d) out[d] = row[d];
    }
  }
}

void EmbedLayer::BackwardCpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  RefuseBottomGradient(propagate_down);
  const float* dy = top[0]->cpu_diff();
  if (param_propagate_down(0)) {
    const float* x = bottom[0]->cpu_data();
    float* dw = blobs_[0]->mutable_cpu_diff();
    // Serial over positions: two positions may hold the same index.
    for (int i = 0; i < m_; ++i) {
      if (!ValidIndex(x[i], k_)) ThrowBadIndex(x[i], i);
      math::Axpy(n_, 1.0f, dy + static_cast<size_t>(i) * n_, dw + static_cast<size_t>(x[i]) * n_);
    }
  }
  if (bias_term_ && param_propagate_down(1)) {
    float* db = blobs_[1]->mutable_cpu_diff();
    for (int i = 0; i < m_; ++i) math::Axpy(n_, 1.0f, dy + static_cast<size_t>(i) * n_, db);
  }
}

CORTADO_REGISTER_LAYER(Embed, EmbedLayer);

}  // namespace cortado
