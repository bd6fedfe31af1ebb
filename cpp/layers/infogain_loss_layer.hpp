// SPDX-License-Identifier: Apache-2.0
// InfogainLoss (Caffe type "InfogainLoss"), as in current BVLC Caffe: a SoftmaxWithLoss whose
// one-hot target is replaced by a row of an "information gain" matrix H (K x K). With
// p = softmax(x) along the class axis (K classes) and l the label of a position,
//   loss = -sum over counted positions of sum_k H[l, k] log(max(p_k, 1e-20)) / normalizer.
// With H the identity it equals SoftmaxWithLoss (up to the clamp: 1e-20 here, FLT_MIN there).
// Bottom 0 holds scores, not probabilities: the layer applies the softmax itself (it did not in
// Caffe releases before 2017, which took probabilities).
//
// Bottoms: 0 = scores x, any shape with the class axis at infogain_loss_param.axis (default 1),
//          outer x K x inner; 1 = labels, outer x inner values read as int, in [0, K) unless
//          equal to loss_param.ignore_label; both with the same shape(0);
//          optional 2 = H, K*K values (1 x 1 x K x K) read row-major. Without it H comes from
//          infogain_loss_param.source, a binary BlobProto file read once in Setup.
// Tops: 0 = the loss, shape [] (count 1); optional 1 = the probabilities (bottom 0's shape).
// Params: infogain_loss_param.axis and .source; loss_param.ignore_label; loss_param.normalization
// (FULL, VALID (default), BATCH_SIZE, NONE; the normalizer is max(1, ...)). The legacy
// loss_param.normalize is rejected, as Caffe rejects it for this layer. loss_weight defaults to
// 1 for the loss (and 0 for the probabilities).
// Backward, w the loss top's diff, to the scores only (labels and H: an error):
//   dx_k = w (p_k sum_j H[l, j] - H[l, k]) / normalizer, 0 at ignored positions.
// Differences from Caffe: labels out of range throw kInvalidArgument (Caffe: DCHECK only); with
// two tops and no loss_weight the weights default to (1, 0) (Caffe fails its loss_weight count
// check); force_backward never reaches H (Caffe would abort); the probability top is a copy.
#pragma once

#include <memory>

#include "layers/layer.hpp"

namespace cortado {

class InfogainLossLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "InfogainLoss"; }
  int MinBottomBlobs() const override { return 2; }
  int MaxBottomBlobs() const override { return 3; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override { return 2; }
  bool AutoTopBlobs() const override { return true; }
  // Only the scores are differentiable (not the labels, not H).
  bool AllowForceBackward(int bottom_index) const override { return bottom_index == 0; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  float Normalizer(int valid_count) const;
  // The label at `index` as an int, checked against [0, K) unless ignored.
  int LabelAt(const float* labels, int index) const;
  [[noreturn]] void ThrowBadLabel(int label, int index) const;
  bool Ignored(int label) const { return has_ignore_label_ && label == ignore_label_; }
  // H: bottom 2 when given, else the matrix read from the source file.
  const Tensor& Infogain(const std::vector<Tensor*>& bottom) const {
    return bottom.size() >= 3 ? *bottom[2] : infogain_;
  }
  void CheckBackward(const std::vector<bool>& propagate_down) const;

  std::unique_ptr<Layer> softmax_;  // the internal Softmax layer (bottom 0 -> prob_)
  Tensor prob_;
  Tensor infogain_;    // H from infogain_loss_param.source (without a third bottom)
  Tensor sum_rows_h_;  // sum_j H[l, j] per row l, K
  caffe::LossParameter::NormalizationMode normalization_ = caffe::LossParameter::VALID;
  bool has_ignore_label_ = false;
  int ignore_label_ = 0;
  int outer_num_ = 0;
  int num_labels_ = 0;  // K
  int inner_num_ = 0;
  // GPU pass state: per position its loss and whether it counts (1), is ignored (0) or has an
  // invalid label (-1); and the normalizer of the last Forward, for Backward (device scalars).
  Tensor position_loss_;
  Tensor position_count_;
  Tensor normalizer_gpu_;
};

}  // namespace cortado
