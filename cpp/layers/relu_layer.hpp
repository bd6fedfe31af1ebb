// SPDX-License-Identifier: Apache-2.0
// ReLU (Caffe type "ReLU"): y = max(x, 0) + negative_slope * min(x, 0).
//
// Params (relu_param): negative_slope (default 0, leaky ReLU when non-zero); engine is ignored.
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself
// (in place).
// Backward: dx = dy where x > 0, dy * negative_slope elsewhere (the derivative at 0 is taken
// as negative_slope, as in Caffe). The sign of x is read back from the top when the layer runs
// in place, which is exact for negative_slope >= 0. Difference from Caffe: with a negative slope
// in place (where the sign is lost) the bottom is copied in Forward so Backward stays right.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ReLULayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "ReLU"; }
  bool TakesHalfTensors() const override { return true; }
  NhwcUse NhwcTensors() const override { return NhwcUse::kSame; }  // element by element
  NhwcUse BlockedTensors() const override { return NhwcUse::kSame; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  // Whether the input must be kept for Backward (negative slope, in place).
  bool KeepsBottom(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) const;

  Tensor bottom_copy_;
};

}  // namespace cortado
