// SPDX-License-Identifier: Apache-2.0
// EuclideanLoss (Caffe type "EuclideanLoss"): loss = sum((a - b)^2) / (2 N), N = a.shape(0).
// Bottoms: 0 = predictions a, 1 = targets b; same shape(0) and same count per sample.
// Top: the loss, shape [] (count 1). loss_weight defaults to 1.
// Backward: da = w (a - b) / N and db = -w (a - b) / N, w the loss top's diff; both bottoms
// may receive gradients (force_backward too, as in Caffe).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class EuclideanLossLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "EuclideanLoss"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  bool AutoTopBlobs() const override { return true; }
  // Unlike other losses, both inputs are differentiable.
  bool AllowForceBackward(int /*bottom_index*/) const override { return true; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  Tensor diff_;  // a - b from the last forward
};

}  // namespace cortado
