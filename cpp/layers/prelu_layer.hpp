// SPDX-License-Identifier: Apache-2.0
// PReLU (Caffe type "PReLU"): y = max(x, 0) + a_c * min(x, 0) with a learned slope a_c per
// channel (He et al., 2015).
//
// Params (prelu_param): channel_shared (default false: one slope per channel; true: one slope
// for all), filler (default constant 0.25).
// Bottom: one tensor with at least 2 axes, read as N x C x (rest); C = shape(1).
// Top: one tensor of the same shape; may be the bottom itself (the bottom is then copied in
// Forward, as Caffe does, because Backward needs x).
// Blobs (Caffe's layout): blobs[0] slopes, shape [C], or shape [] (one value) when
// channel_shared.
// Backward: da_c += sum over channel c of dy * x * (x <= 0); dx = dy * (x > 0 ? 1 : a_c).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class PReLULayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "PReLU"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  void CheckBottom(const Tensor& bottom) const;

  bool channel_shared_ = false;
  Tensor bottom_copy_;  // the input, kept only when running in place
};

}  // namespace cortado
