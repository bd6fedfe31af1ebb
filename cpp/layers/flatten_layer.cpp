// SPDX-License-Identifier: Apache-2.0
#include "layers/flatten_layer.hpp"

namespace cortado {

void FlattenLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  if (top[0] == bottom[0]) {
    CORTADO_THROW(kInvalidArgument, "{}: Flatten cannot run in place", Describe());
  }
  const auto& p = param_.flatten_param();
  const int n = in.num_axes();
  auto canonical = [&](int axis, const char* what) {
    if (axis < -n || axis >= n) {
      CORTADO_THROW(kInvalidArgument, "{}: {} {} is out of range for a bottom of shape {}",
                    Describe(), what, axis, in.ShapeString());
    }
    return axis < 0 ? axis + n : axis;
  };
  const int start = canonical(p.axis(), "axis");
  const int end = canonical(p.end_axis(), "end_axis");
  if (end < start) {
    CORTADO_THROW(kInvalidArgument, "{}: end_axis {} comes before axis {} for a bottom of shape {}",
                  Describe(), p.end_axis(), p.axis(), in.ShapeString());
  }
  std::vector<int> shape(in.shape().begin(), in.shape().begin() + start);
  shape.push_back(in.count(start, end + 1));
  shape.insert(shape.end(), in.shape().begin() + end + 1, in.shape().end());
  top[0]->Reshape(shape);
  top[0]->ShareData(in);
  top[0]->ShareDiff(in);
}

CORTADO_REGISTER_LAYER(Flatten, FlattenLayer);

}  // namespace cortado
