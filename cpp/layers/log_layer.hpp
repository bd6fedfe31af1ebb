// SPDX-License-Identifier: Apache-2.0
// Log (Caffe type "Log"): y = log_base(shift + scale * x); base -1 (the default) means e.
//
// Params (log_param): base (default -1, else must be > 0 and != 1), scale (default 1),
// shift (default 0).
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// Backward: dx = dy * scale / (ln(base) * (shift + scale * x)).
// Differences from Caffe: base 1 is an error (Caffe divides by ln 1 = 0); in place the bottom
// is copied in Forward, because Backward needs x (Caffe's reads the overwritten bottom).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class LogLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Log"; }
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
  float base_scale_ = 1.0f;  // 1 / ln(base)
  float input_scale_ = 1.0f;
  float input_shift_ = 0.0f;
  Tensor bottom_copy_;  // the input, kept only when running in place
};

}  // namespace cortado
