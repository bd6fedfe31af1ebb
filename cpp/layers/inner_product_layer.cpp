// SPDX-License-Identifier: Apache-2.0
#include "layers/inner_product_layer.hpp"

#include "core/config.hpp"
#include "layers/filler.hpp"
#include "math/math.hpp"

namespace cortado {

void InnerProductLayer::Setup(const std::vector<Tensor*>& bottom,
                              const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.inner_product_param();
  if (p.num_output() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: inner_product_param.num_output must be positive",
                  Describe());
  }
  n_ = static_cast<int>(p.num_output());
  bias_term_ = p.bias_term();
  transpose_ = p.transpose();
  const int axis = bottom[0]->CanonicalAxisIndex(p.axis());
  k_ = bottom[0]->count(axis);
  if (!blobs_.empty()) return;  // weights given already (copied from a model)

  blobs_.push_back(
      std::make_shared<Tensor>(transpose_ ? std::vector<int>{k_, n_} : std::vector<int>{n_, k_}));
  Fill(p.weight_filler(), ctx_->rng(), blobs_[0].get());
  if (bias_term_) {
    blobs_.push_back(std::make_shared<Tensor>(std::vector<int>{n_}));
    Fill(p.bias_filler(), ctx_->rng(), blobs_[1].get());
  }
}

bool InnerProductLayer::TakesHalfTensors() const {
  return CORTADO_WITH_CUBLAS && ctx_->device().is_cuda();
}

void InnerProductLayer::Reshape(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  if (bottom[0] == top[0]) {
    CORTADO_THROW(kInvalidArgument, "{}: cannot run in place (top and bottom are one tensor)",
                  Describe());
  }
  const int axis = bottom[0]->CanonicalAxisIndex(param_.inner_product_param().axis());
  k_ = bottom[0]->count(axis);
  m_ = bottom[0]->count(0, axis);
  // The weights fix K; check against them rather than the K seen at Setup, so weights loaded
  // from a model are checked too.
  const Tensor& weights = *blobs_[0];
  const int weight_k = weights.num_axes() == 2 ? weights.shape(transpose_ ? 0 : 1) : -1;
  const int weight_n = weights.num_axes() == 2 ? weights.shape(transpose_ ? 1 : 0) : -1;
  if (weight_k != k_ || weight_n != n_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: bottom {} flattened from axis {} gives K = {} inputs, but the weights "
                  "have shape {} (expected {} for num_output {}{})",
                  Describe(), bottom[0]->ShapeString(), axis, k_, weights.ShapeString(),
                  transpose_ ? fmt::format("{} {}", k_, n_) : fmt::format("{} {}", n_, k_), n_,
                  transpose_ ? ", transpose" : "");
  }
  if (bias_term_ && (blobs_.size() < 2 || blobs_[1]->count() != n_)) {
    CORTADO_THROW(kInvalidArgument, "{}: bias has shape {}, expected {} for num_output {}",
                  Describe(), blobs_.size() < 2 ? std::string("(none)") : blobs_[1]->ShapeString(),
                  n_, n_);
  }
  std::vector<int> top_shape(bottom[0]->shape().begin(), bottom[0]->shape().begin() + axis);
  top_shape.push_back(n_);
  top[0]->Reshape(top_shape);
  if (bias_term_) ones_.assign(m_, 1.0f);
}

void InnerProductLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                   const std::vector<Tensor*>& top) {
  const float* x = bottom[0]->cpu_data();
  const float* w = blobs_[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  float beta = 0.0f;
  if (bias_term_) {
    // Start every row from the bias and let the one GEMM accumulate onto it.
    const float* b = blobs_[1]->cpu_data();
    for (int i = 0; i < m_; ++i) math::Copy(n_, b, y + static_cast<size_t>(i) * n_);
    beta = 1.0f;
  }
  // y (M x N) = x (M x K) * W^T, where W is N x K (or K x N when transposed).
  math::Gemm(false, !transpose_, m_, n_, k_, 1.0f, x, w, beta, y);
}

void InnerProductLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                    const std::vector<bool>& propagate_down,
                                    const std::vector<Tensor*>& bottom) {
  const float* dy = top[0]->cpu_diff();
  if (param_propagate_down(0)) {
    const float* x = bottom[0]->cpu_data();
    float* dw = blobs_[0]->mutable_cpu_diff();
    if (transpose_) {
      // dW (K x N) += x^T (K x M) * dy (M x N)
      math::Gemm(true, false, k_, n_, m_, 1.0f, x, dy, 1.0f, dw);
    } else {
      // dW (N x K) += dy^T (N x M) * x (M x K)
      math::Gemm(true, false, n_, k_, m_, 1.0f, dy, x, 1.0f, dw);
    }
  }
  if (bias_term_ && param_propagate_down(1)) {
    // db (N) += dy^T (N x M) * ones (M)
    math::Gemv(true, m_, n_, 1.0f, dy, ones_.data(), 1.0f, blobs_[1]->mutable_cpu_diff());
  }
  if (propagate_down[0]) {
    // dx (M x K) = dy (M x N) * W (N x K), or dy * W^T when W is stored K x N.
    math::Gemm(false, transpose_, m_, k_, n_, 1.0f, dy, blobs_[0]->cpu_data(), 0.0f,
               bottom[0]->mutable_cpu_diff());
  }
}

CORTADO_REGISTER_LAYER(InnerProduct, InnerProductLayer);

}  // namespace cortado
