// SPDX-License-Identifier: Apache-2.0
// Power (Caffe type "Power"): y = (shift + scale * x) ^ power.
//
// Params (power_param): power (default 1), scale (default 1), shift (default 0).
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// Backward, with Caffe's special cases: dy/dx = 0 when power * scale == 0 (the top is then the
// constant 1 or shift^power); power * scale when power == 1; 2 * scale * (shift + scale * x)
// when power == 2; otherwise power * scale * y / (shift + scale * x) (so power * y / x when
// shift == 0, which is NaN at x == 0, as in Caffe).
// Difference from Caffe: in place, the bottom is copied in Forward when Backward needs x
// (Caffe's Backward reads the overwritten bottom there).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class PowerLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Power"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  // Whether Backward reads x, which in place must be saved before Forward overwrites it.
  bool KeepsBottom(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) const {
    return bottom[0] == top[0] && diff_scale_ != 0.0f && power_ != 1.0f;
  }

  float power_ = 1.0f;
  float scale_ = 1.0f;
  float shift_ = 0.0f;
  float diff_scale_ = 1.0f;  // power * scale
  Tensor bottom_copy_;
};

}  // namespace cortado
