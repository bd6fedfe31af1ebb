// SPDX-License-Identifier: Apache-2.0
// Threshold (Caffe type "Threshold"): y = 1 if x > threshold, else 0 (a step function).
//
// Params (threshold_param): threshold (default 0).
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// Backward: none, as in Caffe (its Backward is NOT_IMPLEMENTED and aborts). Here a Backward
// that asks for the bottom's gradient (propagate_down) throws kUnimplemented naming the layer;
// with propagate_down false it does nothing. Nets that train through a Threshold must set
// `propagate_down: false` on it, as they must in Caffe.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ThresholdLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Threshold"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool BackwardReadsBottomData(int /*index*/) const override { return false; }
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  // Throws kUnimplemented when a gradient is asked for (both passes).
  void RefuseBackward(const std::vector<bool>& propagate_down) const;
};

}  // namespace cortado
