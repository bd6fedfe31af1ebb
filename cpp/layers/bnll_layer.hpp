// SPDX-License-Identifier: Apache-2.0
// BNLL (Caffe type "BNLL", binomial normal log likelihood): y = log(1 + exp(x)) (softplus),
// computed without overflow as Caffe does: x + log(1 + exp(-x)) for x > 0, log(1 + exp(x))
// otherwise.
//
// Params: none.
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// Backward: dx = dy * e / (e + 1) with e = exp(min(x, 50)) (sigmoid(x), with Caffe's
// kBNLL_THRESHOLD = 50 clamp). In place the bottom is copied in Forward, because Backward needs
// x (Caffe reads the overwritten top there and goes wrong).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class BNLLLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "BNLL"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  Tensor bottom_copy_;  // the input, kept only when running in place
};

// Caffe's clamp of the exponent in the BNLL gradient (bnll_layer.cpp, kBNLL_THRESHOLD).
constexpr float kBNLLThreshold = 50.0f;

}  // namespace cortado
