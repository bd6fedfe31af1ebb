// SPDX-License-Identifier: Apache-2.0
// MultinomialLogisticLoss (Caffe type "MultinomialLogisticLoss"): the negative log likelihood of
// given class probabilities p (a Softmax's output, say) at integer labels l:
//   loss = -1/N sum_n log(max(p[n, l_n], 1e-20)).
// (SoftmaxWithLoss computes the same from scores, with a steadier gradient.)
//
// Bottoms: 0 = probabilities, N x K (N x C x 1 x 1 usually; any shape, K = count / N);
//          1 = labels, N values (shape N, or N x 1 x 1 x 1), read as int, in [0, K).
// Top: the loss, shape [] (count 1). loss_weight defaults to 1. No params.
// Backward, w the loss top's diff, to the probabilities only (labels: an error):
//   dp[n, l_n] = -w / (N max(p[n, l_n], 1e-20)), every other element 0.
// Differences from Caffe: labels outside [0, K) throw kInvalidArgument naming the value (Caffe
// reads out of bounds); N = 0 throws.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class MultinomialLogisticLossLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "MultinomialLogisticLoss"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  bool AutoTopBlobs() const override { return true; }
  bool AllowForceBackward(int bottom_index) const override { return bottom_index != 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  void CheckLabelBackward(const std::vector<bool>& propagate_down) const;
  [[noreturn]] void ThrowBadLabel(int sample, float value) const;

  int num_ = 0;  // N
  int dim_ = 0;  // K
  // GPU: per sample its loss term and whether its label is valid (0) or out of range (-1).
  Tensor sample_loss_;
  Tensor sample_invalid_;
};

}  // namespace cortado
