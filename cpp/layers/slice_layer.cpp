// SPDX-License-Identifier: Apache-2.0
#include "layers/slice_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void SliceLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                       const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.slice_param();
  if (p.has_axis() && p.has_slice_dim()) {
    CORTADO_THROW(kInvalidArgument, "{}: give slice_param.axis or slice_dim, not both", Describe());
  }
}

void SliceLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const auto& p = param_.slice_param();
  const Tensor& in = *bottom[0];
  const int num_axes = in.num_axes();
  const int axis = p.has_slice_dim() ? static_cast<int>(p.slice_dim()) : p.axis();
  if (axis >= num_axes || axis < (p.has_slice_dim() ? 0 : -num_axes)) {
    CORTADO_THROW(kInvalidArgument, "{}: slice axis {} is out of range for a bottom of shape {}",
                  Describe(), axis, in.ShapeString());
  }
  slice_axis_ = axis < 0 ? axis + num_axes : axis;
  num_slices_ = in.count(0, slice_axis_);
  slice_size_ = in.count(slice_axis_ + 1);
  const int axis_dim = in.shape(slice_axis_);
  const int num_top = static_cast<int>(top.size());

  std::vector<int> sizes;
  if (p.slice_point_size() > 0) {
    if (p.slice_point_size() != num_top - 1) {
      CORTADO_THROW(kInvalidArgument, "{}: {} slice_point value(s) for {} tops; need {}",
                    Describe(), p.slice_point_size(), num_top, num_top - 1);
    }
    int prev = 0;
    for (int i = 0; i < p.slice_point_size(); ++i) {
      const int point = static_cast<int>(p.slice_point(i));
      if (point <= prev || point >= axis_dim) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: slice_point {} at index {} must be greater than {} and less than "
                      "{} (axis {} of bottom shape {}); points must be strictly increasing",
                      Describe(), p.slice_point(i), i, prev, axis_dim, slice_axis_,
                      in.ShapeString());
      }
      sizes.push_back(point - prev);
      prev = point;
    }
    sizes.push_back(axis_dim - prev);
  } else {
    if (axis_dim % num_top != 0) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: {} tops do not evenly divide axis {} (size {}) of bottom shape {}",
                    Describe(), num_top, slice_axis_, axis_dim, in.ShapeString());
    }
    sizes.assign(num_top, axis_dim / num_top);
  }

  std::vector<int> top_shape = in.shape();
  for (int i = 0; i < num_top; ++i) {
    top_shape[slice_axis_] = sizes[i];
    top[i]->Reshape(top_shape);
  }
  if (num_top == 1) {
    top[0]->ShareData(in);
    top[0]->ShareDiff(in);
  }
}

void SliceLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (top.size() == 1) return;
  const float* in = bottom[0]->cpu_data();
  const int bottom_axis = bottom[0]->shape(slice_axis_);
  int offset = 0;  // position on the slice axis where the current top starts
  for (Tensor* t : top) {
    float* out = t->mutable_cpu_data();
    const int axis_dim = t->shape(slice_axis_);
    const int chunk = axis_dim * slice_size_;
    for (int n = 0; n < num_slices_; ++n) {
      math::Copy(chunk, in + (n * bottom_axis + offset) * slice_size_, out + n * chunk);
    }
    offset += axis_dim;
  }
}

void SliceLayer::BackwardCpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0] || top.size() == 1) return;
  float* diff = bottom[0]->mutable_cpu_diff();
  const int bottom_axis = bottom[0]->shape(slice_axis_);
  int offset = 0;
  for (Tensor* t : top) {
    const float* top_diff = t->cpu_diff();
    const int axis_dim = t->shape(slice_axis_);
    const int chunk = axis_dim * slice_size_;
    for (int n = 0; n < num_slices_; ++n) {
      math::Copy(chunk, top_diff + n * chunk, diff + (n * bottom_axis + offset) * slice_size_);
    }
    offset += axis_dim;
  }
}

CORTADO_REGISTER_LAYER(Slice, SliceLayer);

}  // namespace cortado
