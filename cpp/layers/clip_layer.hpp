// SPDX-License-Identifier: Apache-2.0
// Clip (Caffe type "Clip"): y = max(min, min(x, max)).
//
// Params (clip_param): min, max (both required, as in Caffe's proto).
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// Backward: dx = dy where min <= x <= max (both ends inclusive, as Caffe), 0 elsewhere.
// In place the bottom is copied in Forward, because Backward needs x (Caffe reads the clipped
// top there, which lets the gradient through everywhere).
// Differences from Caffe: a missing clip_param (Caffe clips to [0, 0]) and min > max (Caffe
// outputs min everywhere with a zero gradient) are errors naming the layer; a NaN input gives
// NaN (Caffe gives min on the CPU and max on the GPU).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ClipLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Clip"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  float min_ = 0.0f;
  float max_ = 0.0f;
  Tensor bottom_copy_;  // the input, kept only when running in place
};

}  // namespace cortado
