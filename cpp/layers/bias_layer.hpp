// SPDX-License-Identifier: Apache-2.0
// Bias (Caffe type "Bias"): top = bottom[0] + b, with b broadcast over bottom[0].
// b is bottom[1] when given, else a learned blob (blobs_[0]).
// Params: bias_param.axis (default 1; negative counts from the end): the first axis of
// bottom[0] that b lines up with; bias_param.num_axes (default 1; learned b only): how many
// axes b covers (-1: all the rest, 0: a scalar); bias_param.filler (learned b; default 0).
// b's shape must equal bottom[0]'s dimensions [axis, axis + b.num_axes()); a scalar b (0 axes)
// is always allowed. E.g. bottom[0] N x C x H x W with axis 1 and b of shape C adds b[c] to
// every element of channel c.
// Bottoms: one or two. Top: one, shaped like bottom[0]; may be in-place.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class BiasLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Bias"; }
  int MinBottomBlobs() const override { return 1; }
  int MaxBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int outer_dim_ = 0;  // product of bottom[0]'s dimensions before the bias axes
  int bias_dim_ = 0;   // number of bias values
  int inner_dim_ = 0;  // product of bottom[0]'s dimensions after the bias axes
};

}  // namespace cortado
