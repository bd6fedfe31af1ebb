// SPDX-License-Identifier: Apache-2.0
#include "layers/filter_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void FilterLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (top.size() + 1 != bottom.size()) {
    CORTADO_THROW(kInvalidArgument,
                  "{} needs one top per filtered bottom (all bottoms but the last, the "
                  "selector): it has {} bottom(s) and {} top(s)",
                  Describe(), bottom.size(), top.size());
  }
  num_bottoms_ = static_cast<int>(bottom.size());
  first_reshape_ = true;
}

void FilterLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& selector = *bottom.back();
  bool singletons = selector.num_axes() >= 1;
  for (int i = 1; i < selector.num_axes(); ++i) singletons &= selector.shape(i) == 1;
  if (!singletons) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the selector (the last bottom) must be N values, every axis after the "
                  "first 1; got shape {}",
                  Describe(), selector.ShapeString());
  }
  for (size_t i = 0; i + 1 < bottom.size(); ++i) {
    if (bottom[i]->num_axes() < 1 || bottom[i]->shape(0) != selector.shape(0)) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: bottom {} (shape {}) must have the selector's first dimension {}",
                    Describe(), i, bottom[i]->ShapeString(), selector.shape(0));
    }
  }
  if (first_reshape_) {
    // As Caffe: the selector holds no values yet while the net is set up.
    first_reshape_ = false;
    ShapeTops(bottom, top, selector.shape(0));
    return;
  }
  Select(bottom);
  ShapeTops(bottom, top, -1);
}

void FilterLayer::Select(const std::vector<Tensor*>& bottom) {
  const Tensor& selector = *bottom.back();
  const float* s = selector.cpu_data();
  selected_.clear();
  for (int n = 0; n < selector.count(); ++n) {
    if (s[n] != 0.0f) selected_.push_back(n);
  }
}

void FilterLayer::ShapeTops(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top,
                            int rows) const {
  for (size_t t = 0; t < top.size(); ++t) {
    std::vector<int> shape = bottom[t]->shape();
    shape[0] = rows >= 0 ? rows : static_cast<int>(selected_.size());
    top[t]->Reshape(shape);
  }
}

void FilterLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  Select(bottom);
  ShapeTops(bottom, top, -1);
  for (size_t t = 0; t < top.size(); ++t) {
    const int dim = bottom[t]->count(1);
    const float* in = bottom[t]->cpu_data();
    float* out = top[t]->mutable_cpu_data();
    for (size_t k = 0; k < selected_.size(); ++k) {
      math::Copy(dim, in + static_cast<int64_t>(selected_[k]) * dim,
                 out + static_cast<int64_t>(k) * dim);
    }
  }
}

void FilterLayer::CheckSelectorBackward(const std::vector<bool>& propagate_down) const {
  if (propagate_down.back()) {
    CORTADO_THROW(kInvalidArgument, "{} cannot backpropagate to its selector (bottom {})",
                  Describe(), propagate_down.size() - 1);
  }
}

void FilterLayer::BackwardCpu(const std::vector<Tensor*>& top,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& bottom) {
  CheckSelectorBackward(propagate_down);
  for (size_t t = 0; t < top.size(); ++t) {
    if (!propagate_down[t]) continue;
    const int dim = bottom[t]->count(1);
    float* dx = bottom[t]->mutable_cpu_diff();
    math::Set(bottom[t]->count(), 0.0f, dx);
    const float* dtop = top[t]->cpu_diff();
    for (size_t k = 0; k < selected_.size(); ++k) {
      math::Copy(dim, dtop + static_cast<int64_t>(k) * dim,
                 dx + static_cast<int64_t>(selected_[k]) * dim);
    }
  }
}

CORTADO_REGISTER_LAYER(Filter, FilterLayer);

}  // namespace cortado
