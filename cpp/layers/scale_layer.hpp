// SPDX-License-Identifier: Apache-2.0
// Scale (Caffe type "Scale"): top = bottom[0] * s (+ b), with s (and b) broadcast over
// bottom[0]. s is bottom[1] when given, else a learned blob.
// Params: scale_param.axis (default 1; negative counts from the end): the first axis of
// bottom[0] that s lines up with; scale_param.num_axes (default 1; learned s only): how many
// axes s covers (-1: all the rest, 0: a scalar); scale_param.filler (learned s; default 1);
// scale_param.bias_term (default false) and bias_filler (default 0): also add a learned bias
// of s's shape.
// s's shape must equal bottom[0]'s dimensions [axis, axis + s.num_axes()); a scalar s is
// always allowed. Param blobs, as Caffe: [scale, bias] with one bottom, [bias] with two.
// Bottoms: one or two. Top: one, shaped like bottom[0]; may be in-place.
// Difference from Caffe: Caffe runs the bias through an inner Bias layer; the bias is added
// here directly, with the same blob and the same result.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ScaleLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Scale"; }
  int MinBottomBlobs() const override { return 1; }
  int MaxBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

  // Whether this is a learned scale of one value per channel (axis 1, one axis): the form a
  // BatchNorm layer can compute in its own passes (BatchNormLayer::FuseScale).
  bool ScalesChannels() const { return learned_ && axis_ == 1 && blobs_[0]->num_axes() == 1; }
  // Index of the bias in blobs(), or -1 without bias_term.
  int bias_index() const { return bias_index_; }

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int bias_index_ = -1;   // index of the bias in blobs_, or -1 without bias_term
  bool learned_ = false;  // s is blobs_[0] (one bottom), not bottom[1]
  int axis_ = 0;          // bottom[0]'s first axis that s lines up with (after Reshape)
  int outer_dim_ = 0;     // product of bottom[0]'s dimensions before the scale axes
  int scale_dim_ = 0;     // number of scale values
  int inner_dim_ = 0;     // product of bottom[0]'s dimensions after the scale axes
  Tensor saved_input_;    // in-place only: bottom[0]'s data before Forward, for Backward
};

}  // namespace cortado
