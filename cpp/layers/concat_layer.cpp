// SPDX-License-Identifier: Apache-2.0
#include "layers/concat_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void ConcatLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                        const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.concat_param();
  if (p.has_axis() && p.has_concat_dim()) {
    CORTADO_THROW(kInvalidArgument, "{}: give concat_param.axis or concat_dim, not both",
                  Describe());
  }
}

void ConcatLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const auto& p = param_.concat_param();
  const Tensor& first = *bottom[0];
  const int num_axes = first.num_axes();
  const int axis = p.has_concat_dim() ? static_cast<int>(p.concat_dim()) : p.axis();
  if (axis >= num_axes || axis < (p.has_concat_dim() ? 0 : -num_axes)) {
    CORTADO_THROW(kInvalidArgument, "{}: concat axis {} is out of range for bottom 0 of shape {}",
                  Describe(), axis, first.ShapeString());
  }
  concat_axis_ = axis < 0 ? axis + num_axes : axis;

  std::vector<int> top_shape = first.shape();
  for (size_t i = 1; i < bottom.size(); ++i) {
    const Tensor& b = *bottom[i];
    bool compatible = b.num_axes() == num_axes;
    for (int j = 0; compatible && j < num_axes; ++j) {
      compatible = j == concat_axis_ || b.shape(j) == first.shape(j);
    }
    if (!compatible) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: bottom {} has shape {} but bottom 0 has shape {}; all bottoms must "
                    "agree except on the concat axis {}",
                    Describe(), i, b.ShapeString(), first.ShapeString(), concat_axis_);
    }
    top_shape[concat_axis_] += b.shape(concat_axis_);
  }
  top[0]->Reshape(top_shape);
  num_concats_ = first.count(0, concat_axis_);
  concat_input_size_ = first.count(concat_axis_ + 1);
  if (bottom.size() == 1) {
    top[0]->ShareData(*bottom[0]);
    top[0]->ShareDiff(*bottom[0]);
  }
}

void ConcatLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (bottom.size() == 1) return;
  float* top_data = top[0]->mutable_cpu_data();
  const int top_axis = top[0]->shape(concat_axis_);
  int offset = 0;  // position on the concat axis where the current bottom starts
  for (Tensor* b : bottom) {
    const float* data = b->cpu_data();
    const int axis_dim = b->shape(concat_axis_);
    const int chunk = axis_dim * concat_input_size_;
    for (int n = 0; n < num_concats_; ++n) {
      math::Copy(chunk, data + n * chunk, top_data + (n * top_axis + offset) * concat_input_size_);
    }
    offset += axis_dim;
  }
}

void ConcatLayer::BackwardCpu(const std::vector<Tensor*>& top,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& bottom) {
  if (bottom.size() == 1) return;
  const float* top_diff = top[0]->cpu_diff();
  const int top_axis = top[0]->shape(concat_axis_);
  int offset = 0;
  for (size_t i = 0; i < bottom.size(); ++i) {
    Tensor* b = bottom[i];
    const int axis_dim = b->shape(concat_axis_);
    if (propagate_down[i]) {
      float* diff = b->mutable_cpu_diff();
      const int chunk = axis_dim * concat_input_size_;
      for (int n = 0; n < num_concats_; ++n) {
        math::Copy(chunk, top_diff + (n * top_axis + offset) * concat_input_size_,
                   diff + n * chunk);
      }
    }
    offset += axis_dim;
  }
}

CORTADO_REGISTER_LAYER(Concat, ConcatLayer);

}  // namespace cortado
