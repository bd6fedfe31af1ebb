// SPDX-License-Identifier: Apache-2.0
// SigmoidCrossEntropyLoss (Caffe type "SigmoidCrossEntropyLoss"): cross-entropy between
// sigmoid(x) and targets t in [0, 1], summed over every element and divided by a normalizer:
//   loss = -sum [x (t - (x >= 0)) - log(1 + exp(x - 2 x (x >= 0)))] / normalizer,
// the overflow-free form Caffe uses.
// Bottoms: 0 = scores x, 1 = targets t with the same count and the same shape(0).
// Top: the loss, shape [] (count 1). loss_weight defaults to 1.
// Params: loss_param.ignore_label (a target whose int value equals it adds no loss and no
// gradient); loss_param.normalization (FULL, VALID, BATCH_SIZE, NONE). As in current Caffe,
// when normalization is unset the legacy loss_param.normalize decides (true: VALID, false:
// BATCH_SIZE), and when both are unset the mode is BATCH_SIZE (not the proto default VALID).
// N = shape(0) for BATCH_SIZE, count for FULL; the normalizer is max(1, ...).
// Backward: d/dx = (sigmoid(x) - t) w / normalizer to bottom 0; targets get none (an error).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class SigmoidCrossEntropyLossLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "SigmoidCrossEntropyLoss"; }
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
  float Normalizer(int valid_count) const;

  caffe::LossParameter::NormalizationMode normalization_ = caffe::LossParameter::BATCH_SIZE;
  bool has_ignore_label_ = false;
  int ignore_label_ = 0;
  int outer_num_ = 0;        // shape(0)
  int inner_num_ = 0;        // count(1)
  float normalizer_ = 1.0f;  // from the last forward, reused by backward
  // GPU pass state: per element its loss and whether it counts (1) or is ignored (0); and the
  // normalizer of the last Forward, for Backward (a device scalar).
  Tensor element_loss_;
  Tensor element_count_;
  Tensor normalizer_gpu_;
};

}  // namespace cortado
