// SPDX-License-Identifier: Apache-2.0
#include "layers/argmax_layer.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>

namespace cortado {

void ArgMaxLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.argmax_param();
  out_max_val_ = p.out_max_val();
  if (p.top_k() < 1 || p.top_k() > static_cast<unsigned>(INT32_MAX)) {
    CORTADO_THROW(kInvalidArgument, "{}: top_k must be at least 1, got {}", Describe(), p.top_k());
  }
  top_k_ = static_cast<int>(p.top_k());
  has_axis_ = p.has_axis();
  // Reshape checks top_k against the bottom's shape.
  if (has_axis_) axis_ = bottom[0]->CanonicalAxisIndex(p.axis());
}

void ArgMaxLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  std::vector<int> shape;
  if (has_axis_) {
    if (top_k_ > bottom[0]->shape(axis_)) {
      CORTADO_THROW(kInvalidArgument, "{}: top_k ({}) exceeds the size of axis {} of {}",
                    Describe(), top_k_, axis_, bottom[0]->ShapeString());
    }
    shape = bottom[0]->shape();
    shape[axis_] = top_k_;
  } else {
    if (bottom[0]->num_axes() < 1 || top_k_ > bottom[0]->count(1)) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: top_k ({}) exceeds the number of values per sample of {}", Describe(),
                    top_k_, bottom[0]->ShapeString());
    }
    // Caffe keeps at least 3 axes: N x (1 or 2) x top_k, then 1s.
    shape.assign(std::max(3, bottom[0]->num_axes()), 1);
    shape[0] = bottom[0]->shape(0);
    shape[1] = out_max_val_ ? 2 : 1;
    shape[2] = top_k_;
  }
  top[0]->Reshape(shape);
}

void ArgMaxLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const float* in = bottom[0]->cpu_data();
  float* out = top[0]->mutable_cpu_data();
  // dim: entries compared per search; stride: distance between them (1 when flattened).
  int dim = 0;
  int stride = 1;
  if (has_axis_) {
    dim = bottom[0]->shape(axis_);
    stride = bottom[0]->count(axis_ + 1);
  } else {
    dim = bottom[0]->count(1);
  }
  if (dim == 0) return;
  const int num = bottom[0]->count() / dim;
  candidates_.resize(dim);
  for (int i = 0; i < num; ++i) {
    const int outer = i / stride;
    const int inner = i % stride;
    for (int j = 0; j < dim; ++j) {
      candidates_[j] = {in[(outer * dim + j) * stride + inner], j};
    }
    // Descending by value, then by index: the same order as Caffe's partial_sort.
    std::partial_sort(candidates_.begin(), candidates_.begin() + top_k_, candidates_.end(),
                      std::greater<std::pair<float, int>>());
    for (int k = 0; k < top_k_; ++k) {
      const float index = static_cast<float>(candidates_[k].second);
      const float value = candidates_[k].first;
      if (has_axis_) {
        out[(outer * top_k_ + k) * stride + inner] = out_max_val_ ? value : index;
      } else if (out_max_val_) {
        out[2 * i * top_k_ + k] = index;
        out[2 * i * top_k_ + top_k_ + k] = value;
      } else {
        out[i * top_k_ + k] = index;
      }
    }
  }
}

void ArgMaxLayer::BackwardCpu(const std::vector<Tensor*>& /*top*/,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& /*bottom*/) {
  if (propagate_down[0]) {
    CORTADO_THROW(kUnimplemented, "{} has no backward pass", Describe());
  }
}

CORTADO_REGISTER_LAYER(ArgMax, ArgMaxLayer);

}  // namespace cortado
