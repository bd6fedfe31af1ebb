// SPDX-License-Identifier: Apache-2.0
// Slice (Caffe type "Slice"): cuts its bottom into pieces along one axis, one piece per top.
// Params: slice_param.axis (default 1, negative counts from the end) or the legacy
// slice_param.slice_dim (non-negative only); slice_param.slice_point: strictly increasing
// indices on the slice axis, one fewer than the tops. Without slice points the axis is split
// into equal parts, so the number of tops must divide it.
// Bottom: one. Tops: one or more. With a single top it shares the bottom's data and diff.
// Difference from Caffe: a slice point at or past the end of the axis (which would leave an
// empty or negative last piece) is an error here.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class SliceLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Slice"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int MinTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int slice_axis_ = 1;
  int num_slices_ = 0;  // product of the dimensions before the slice axis
  int slice_size_ = 0;  // product of the dimensions after it
};

}  // namespace cortado
