// SPDX-License-Identifier: Apache-2.0
// Exp (Caffe type "Exp"): y = base ^ (shift + scale * x); base -1 (the default) means e.
//
// Params (exp_param): base (default -1, else must be > 0), scale (default 1), shift (default 0).
// Computed as y = outer * exp(inner * x) with inner = ln(base) * scale, outer = base^shift.
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// Backward: dx = dy * y * inner, from the top data only, so it is exact in place.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ExpLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Exp"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override {
    top[0]->ReshapeLike(*bottom[0]);
  }

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  float inner_scale_ = 1.0f;
  float outer_scale_ = 1.0f;
};

}  // namespace cortado
