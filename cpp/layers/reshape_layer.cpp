// SPDX-License-Identifier: Apache-2.0
#include "layers/reshape_layer.hpp"

namespace cortado {

void ReshapeLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (top[0] == bottom[0]) {
    CORTADO_THROW(kInvalidArgument, "{}: Reshape cannot run in place", Describe());
  }
  const auto& shape = param_.reshape_param().shape();
  copy_axes_.clear();
  inferred_axis_ = -1;
  constant_count_ = 1;
  for (int i = 0; i < shape.dim_size(); ++i) {
    const int64_t dim = shape.dim(i);
    if (dim == 0) {
      copy_axes_.push_back(i);
    } else if (dim == -1) {
      if (inferred_axis_ >= 0) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: reshape_param.shape has more than one -1 (dims {} and {}); at most "
                      "one dimension can be inferred",
                      Describe(), inferred_axis_, i);
      }
      inferred_axis_ = i;
    } else if (dim < -1) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: reshape_param.shape dim {} is {}; dims must be > 0, "
                    "0 (copy) or -1 (infer)",
                    Describe(), i, dim);
    } else {
      constant_count_ *= static_cast<int>(dim);
    }
  }
}

void ReshapeLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const auto& p = param_.reshape_param();
  const Tensor& in = *bottom[0];
  const int bottom_axes = in.num_axes();
  // Unlike other layers, a negative axis counts so that -1 means "after the last axis".
  const int start = p.axis() >= 0 ? p.axis() : bottom_axes + p.axis() + 1;
  if (start < 0 || start > bottom_axes) {
    CORTADO_THROW(kInvalidArgument, "{}: axis {} is out of range for a bottom of shape {}",
                  Describe(), p.axis(), in.ShapeString());
  }
  if (p.num_axes() < -1) {
    CORTADO_THROW(kInvalidArgument, "{}: num_axes must be >= -1, got {}", Describe(), p.num_axes());
  }
  const int end = p.num_axes() == -1 ? bottom_axes : start + p.num_axes();
  if (end > bottom_axes) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: axis {} with num_axes {} goes past the last axis of bottom shape {}",
                  Describe(), p.axis(), p.num_axes(), in.ShapeString());
  }

  const auto& shape = p.shape();
  std::vector<int> top_shape(in.shape().begin(), in.shape().begin() + start);
  for (int i = 0; i < shape.dim_size(); ++i) top_shape.push_back(static_cast<int>(shape.dim(i)));
  top_shape.insert(top_shape.end(), in.shape().begin() + end, in.shape().end());

  for (int axis : copy_axes_) {
    if (start + axis >= bottom_axes) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: reshape_param.shape dim {} is 0 (copy) but bottom shape {} has no "
                    "axis {} to copy",
                    Describe(), axis, in.ShapeString(), start + axis);
    }
    top_shape[start + axis] = in.shape(start + axis);
  }
  if (inferred_axis_ >= 0) {
    int64_t known = static_cast<int64_t>(constant_count_) * in.count(0, start) * in.count(end);
    for (int axis : copy_axes_) known *= top_shape[start + axis];
    if (known == 0 || in.count() % known != 0) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: bottom shape {} cannot be reshaped: its count is not divisible by "
                    "the product {} of the other dimensions",
                    Describe(), in.ShapeString(), known);
    }
    top_shape[start + inferred_axis_] = static_cast<int>(in.count() / known);
  }
  int64_t top_count = 1;
  for (int d : top_shape) top_count *= d;
  if (top_count != in.count()) {
    CORTADO_THROW(kInvalidArgument, "{}: new shape {} has {} elements but bottom shape {} has {}",
                  Describe(), fmt::join(top_shape, " "), top_count, in.ShapeString(), in.count());
  }
  top[0]->Reshape(top_shape);
  top[0]->ShareData(in);
  top[0]->ShareDiff(in);
}

CORTADO_REGISTER_LAYER(Reshape, ReshapeLayer);

}  // namespace cortado
