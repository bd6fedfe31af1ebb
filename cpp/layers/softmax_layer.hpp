// SPDX-License-Identifier: Apache-2.0
// Softmax (Caffe type "Softmax"): top = exp(x - max) / sum(exp(x - max)) along one axis; every
// position on the other axes is an independent distribution.
// Params: softmax_param.axis (default 1, negative counts from the end); softmax_param.engine is
// accepted and ignored. One bottom, one top of the bottom's shape; in-place works.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class SoftmaxLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Softmax"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int outer_num_ = 0;           // product of the axes before the softmax axis
  int channels_ = 0;            // size of the softmax axis
  int inner_num_ = 0;           // product of the axes after it
  std::vector<float> scratch_;  // one value per inner position (max, then sum or dot)
};

}  // namespace cortado
