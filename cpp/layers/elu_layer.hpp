// SPDX-License-Identifier: Apache-2.0
// ELU (Caffe type "ELU"): y = x for x > 0, alpha * (exp(x) - 1) otherwise (Clevert et al., 2015).
//
// Params (elu_param): alpha (default 1).
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// Backward: dx = dy for x > 0, dy * (y + alpha) otherwise (= dy * alpha * exp(x)), as Caffe.
// In place the branch is read from the top (y > 0 exactly when x > 0 for alpha >= 0); with a
// negative alpha in place the bottom is copied in Forward instead (Caffe would go wrong there).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ELULayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "ELU"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  bool KeepsBottom(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) const {
    return bottom[0] == top[0] && param_.elu_param().alpha() < 0.0f;
  }

  Tensor bottom_copy_;
};

}  // namespace cortado
