// SPDX-License-Identifier: Apache-2.0
// Crop (Caffe type "Crop"): cuts a window out of bottom[0] whose size, on every axis from
// crop_param.axis on, is bottom[1]'s size on that axis; earlier axes are kept whole.
// Params: crop_param.axis (default 2; negative counts from the end), crop_param.offset: none
// (all 0), one for all cropped axes, or one per cropped axis.
// Bottoms: two (bottom[1] only gives the shape and receives no gradient). Top: one.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class CropLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Crop"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int start_axis_ = 2;
  std::vector<int> offsets_;  // per axis of bottom[0]; 0 before start_axis_
};

}  // namespace cortado
