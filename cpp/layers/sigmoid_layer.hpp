// SPDX-License-Identifier: Apache-2.0
// Sigmoid (Caffe type "Sigmoid"): y = 1 / (1 + exp(-x)), computed as 0.5 * tanh(0.5 x) + 0.5
// as Caffe does (no overflow for large |x|).
//
// Params: none read (sigmoid_param.engine is ignored).
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// Backward: dx = dy * y * (1 - y), from the top data only, so it is exact in place.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class SigmoidLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Sigmoid"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override {
    top[0]->ReshapeLike(*bottom[0]);
  }

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;
};

}  // namespace cortado
