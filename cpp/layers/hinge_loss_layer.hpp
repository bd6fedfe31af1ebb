// SPDX-License-Identifier: Apache-2.0
// HingeLoss (Caffe type "HingeLoss"): the one-versus-all hinge loss of scores x against integer
// labels l. With t_nk = -1 for k = l_n and +1 otherwise, and m_nk = max(0, 1 + t_nk x_nk),
//   L1 (default): loss = sum_nk m_nk / N;   L2: loss = sum_nk m_nk^2 / N.
//
// Params (hinge_loss_param): norm, L1 (default) or L2.
// Bottoms: 0 = scores, N x K (any shape: K = count / N); 1 = labels, N values read as int, in
//          [0, K). Top: the loss, shape [] (count 1). loss_weight defaults to 1.
// Backward, w the loss top's diff, to the scores only (labels: an error):
//   L1: dx_nk = w t_nk sign(m_nk) / N;   L2: dx_nk = 2 w t_nk m_nk / N,
// as Caffe (sign(0) = 0, so a score exactly at the hinge gets no gradient).
// Differences from Caffe: labels outside [0, K) throw kInvalidArgument naming the value (Caffe
// reads out of bounds); the labels must be exactly N values; N = 0 throws. Caffe keeps m in the
// scores' diff between the passes; here it has a buffer of its own.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class HingeLossLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "HingeLoss"; }
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
  bool IsL2() const { return param_.hinge_loss_param().norm() == caffe::HingeLossParameter::L2; }

  int num_ = 0;     // N
  int dim_ = 0;     // K
  Tensor margin_;   // m from the last forward, the scores' shape
  Tensor invalid_;  // GPU: per element -1 where its sample's label is out of range, else 0
};

}  // namespace cortado
