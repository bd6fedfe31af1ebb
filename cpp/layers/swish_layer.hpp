// SPDX-License-Identifier: Apache-2.0
// Swish (Caffe type "Swish"): y = x * sigmoid(beta * x) (Ramachandran et al., 2017), with
// sigmoid(z) = 0.5 * tanh(0.5 * z) + 0.5 as Caffe's Sigmoid layer computes it.
//
// Params (swish_param): beta (default 1).
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// Backward (as Caffe): dx = dy * (beta * y + s * (1 - beta * y)) with s = sigmoid(beta * x)
// kept from Forward; it reads only y and s, so it also works in place.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class SwishLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Swish"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool BackwardReadsBottomData(int /*index*/) const override { return false; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  Tensor sigmoid_;  // sigmoid(beta * x), from Forward
};

}  // namespace cortado
