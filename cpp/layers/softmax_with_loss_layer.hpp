// SPDX-License-Identifier: Apache-2.0
// SoftmaxWithLoss (Caffe type "SoftmaxWithLoss"): multinomial logistic loss of the softmax of
// bottom 0, i.e. loss = -sum log(max(p[label], FLT_MIN)) / normalizer over every position.
//
// Bottoms: 0 = scores, any shape with the class axis at softmax_param.axis (default 1);
//          1 = labels, outer x inner values (N*H*W for N x C x H x W scores), read as int,
//          in [0, classes) unless equal to ignore_label. Both must have the same shape(0).
// Tops: 0 = the loss, shape [] (count 1); optional 1 = the probabilities (bottom 0's shape).
// Params: softmax_param.axis; loss_param.ignore_label; loss_param.normalization (FULL, VALID
// (default), BATCH_SIZE, NONE), or, when normalization is unset, the legacy loss_param.normalize
// (true: VALID, false: BATCH_SIZE). The normalizer is max(1, ...). loss_weight defaults to 1
// for the loss (and 0 for the probabilities).
// Backward: gradient to bottom 0 only; asking for the labels' gradient is an error. The
// probability top gets no gradient (as in Caffe).
// Differences from Caffe: labels out of range throw kInvalidArgument (Caffe: DCHECK only);
// with two tops and no loss_weight the weights default to (1, 0), where Caffe fails its
// loss_weight count check; the internal Softmax never inherits loss_weight values.
#pragma once

#include <memory>

#include "layers/layer.hpp"

namespace cortado {

class SoftmaxWithLossLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "SoftmaxWithLoss"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override { return 2; }
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
  // Caffe's get_normalizer: the divisor for `valid_count` counted positions (-1: unknown).
  float Normalizer(int valid_count) const;
  // The label at `index` as an int, checked against [0, classes) unless ignored.
  int LabelAt(const float* labels, int index) const;

  std::unique_ptr<Layer> softmax_;  // the internal Softmax layer (bottom 0 -> prob_)
  Tensor prob_;
  caffe::LossParameter::NormalizationMode normalization_ = caffe::LossParameter::VALID;
  bool has_ignore_label_ = false;
  int ignore_label_ = 0;
  int outer_num_ = 0;
  int classes_ = 0;
  int inner_num_ = 0;
  // GPU pass state: per position its loss and whether it counts (1), is ignored (0) or has an
  // invalid label (-1); and the normalizer of the last Forward, for Backward (device scalars).
  Tensor position_loss_;
  Tensor position_count_;
  Tensor normalizer_gpu_;
};

}  // namespace cortado
