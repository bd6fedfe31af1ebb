// SPDX-License-Identifier: Apache-2.0
// ContrastiveLoss (Caffe type "ContrastiveLoss"), after Hadsell, Chopra and LeCun (2006): with
// d_n = ||a_n - b_n|| and y_n the similarity of pair n (nonzero, as an int: similar),
//   loss = 1/(2N) sum_n [ y_n d_n^2 + (1 - y_n) max(margin - d_n, 0)^2 ],
// or, with legacy_version, (1 - y_n) max(margin - d_n^2, 0) for the dissimilar pairs.
//
// Params (contrastive_loss_param): margin (default 1), legacy_version (default false).
// Bottoms: 0 = a and 1 = b, shape N x C (or N x C x 1 x 1: every axis after the second 1);
//          2 = y, N values (shape N, or N x 1 x 1 x 1), read as int: 0 dissimilar, else similar.
// Top: the loss, shape [] (count 1). loss_weight defaults to 1.
// Backward, w the loss top's diff, to a (and its negative to b); y gets none (an error):
//   similar pairs:    w (a - b) / N
//   dissimilar pairs: -w (margin - d) / (d + 1e-4) (a - b) / N where margin > d, else 0
//                     (legacy: -w (a - b) / N where margin > d^2, else 0).
// The 1e-4 keeps the division finite for coinciding pairs, as in Caffe.
// Differences from Caffe: Caffe's GPU backward of the legacy version drops the factor (a - b)
// (a bug); both passes here compute what Caffe's CPU backward computes. Bad shapes (a label
// count other than N included, which Caffe reads past) and N = 0 throw kInvalidArgument.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ContrastiveLossLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "ContrastiveLoss"; }
  int ExactNumBottomBlobs() const override { return 3; }
  int ExactNumTopBlobs() const override { return 1; }
  bool AutoTopBlobs() const override { return true; }
  // a and b are both differentiable; the similarity label is not.
  bool AllowForceBackward(int bottom_index) const override { return bottom_index != 2; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  void CheckLabelBackward(const std::vector<bool>& propagate_down) const;

  int num_ = 0;       // N
  int channels_ = 0;  // C
  Tensor diff_;       // a - b from the last forward, N x C
  Tensor dist_sq_;    // d^2 per pair, N
  Tensor pair_loss_;  // GPU: each pair's term of the sum, N
};

}  // namespace cortado
