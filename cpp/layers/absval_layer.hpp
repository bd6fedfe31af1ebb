// SPDX-License-Identifier: Apache-2.0
// AbsVal (Caffe type "AbsVal"): y = |x|.
//
// Params: none.
// Bottom: one tensor of any shape. Top: one tensor of the same shape.
// Backward: dx = dy * sign(x) (0 at x = 0, as Caffe).
// Difference from Caffe: Caffe refuses to run in place; here top may be the bottom, and the
// bottom is then copied in Forward because Backward needs the sign of x.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class AbsValLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "AbsVal"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  Tensor bottom_copy_;  // the input, kept only when running in place
};

}  // namespace cortado
