// SPDX-License-Identifier: Apache-2.0
// LRN (Caffe type "LRN"): local response normalisation, y = x * s^-beta, where s depends on
// the squares of x's neighbours:
//   ACROSS_CHANNELS: s = k + alpha / n * sum of x^2 over channels c - (n-1)/2 .. c + (n-1)/2
//                    at the same (h, w) (missing channels count as 0);
//   WITHIN_CHANNEL:  s = 1 + alpha / n^2 * sum of x^2 over the n x n window centred on (h, w)
//                    in the same channel (outside the image counts as 0).
// n is lrn_param.local_size (default 5, must be odd). Params: local_size, alpha (default 1),
// beta (default 0.75), k (default 1; ACROSS_CHANNELS only: Caffe's within-channel LRN ignores
// k and uses 1), norm_region (default ACROSS_CHANNELS).
// Bottom: one, N x C x H x W. Top: one of the same shape.
// Difference from Caffe: Caffe builds WITHIN_CHANNEL from Split, Power, average Pooling and
// Eltwise layers; it is computed directly here with the same formula.
// Mixed precision on the GPU (Layer::HalfTensors): values, gradients and s in the 16-bit type,
// the arithmetic in float32 (without cuDNN, whose LRN takes float32 here).
#pragma once

#include <memory>

#include "layers/layer.hpp"

namespace cortado {

class LRNLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "LRN"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool TakesHalfTensors() const override { return true; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  void CrossChannelForward(const Tensor& bottom, Tensor* top);
  void CrossChannelBackward(const Tensor& top, const Tensor& bottom, float* bottom_diff);
  void WithinChannelForward(const Tensor& bottom, Tensor* top);
  void WithinChannelBackward(const Tensor& top, const Tensor& bottom, float* bottom_diff);

  int size_ = 5;
  int pre_pad_ = 2;  // (size - 1) / 2: neighbours on each side
  float alpha_ = 1.0f;
  float beta_ = 0.75f;
  float k_ = 1.0f;
  bool across_channels_ = true;
  int num_ = 0, channels_ = 0, height_ = 0, width_ = 0;
  Tensor scale_;               // s for every element, kept for Backward
  std::vector<float> padded_;  // one image's per-channel planes with pre_pad_ zero planes
                               // on each side (across) or one padded plane (within)
  std::vector<float> accum_;   // one H x W plane of running sums
  // cuDNN's cross-channel LRN (lrn_layer.cu), made for the current shape on first GPU use.
  std::shared_ptr<void> cudnn_;
};

}  // namespace cortado
