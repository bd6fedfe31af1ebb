// SPDX-License-Identifier: Apache-2.0
// Pooling (Caffe type "Pooling"): max or average over 2-D windows of each channel.
// Params (pooling_param): pool (MAX, AVE, or STOCHASTIC, which runs on a GPU context only and
// throws kUnimplemented on the CPU, as Caffe has no CPU version), kernel_size or
// kernel_h + kernel_w, pad or pad_h + pad_w, stride or stride_h + stride_w, global_pooling (the
// window is the whole image; pad 0, stride 1), round_mode (CEIL, Caffe's default, or FLOOR).
// engine is ignored.
// Bottom: one, [N, C, H, W]. Tops: [N, C, PH, PW], and for MAX optionally a second top of the
// same shape holding the index (h * W + w, as float) of each maximum in its channel.
// PH = ceil((H + 2 * pad_h - kernel_h) / stride_h) + 1 (floor for FLOOR); with any padding,
// a last window that would start in the padding (at or beyond H + pad_h) is dropped.
// AVE divides by the window size clipped to the padded bounds [-pad, H + pad), so padded
// positions count but positions past the padding do not (Caffe's rule).
// Difference from Caffe: a window that lies wholly outside the image (only possible when a
// kernel smaller than the stride rounds up past the edge, where Caffe reads out of bounds)
// gives 0 and no gradient.
// STOCHASTIC (GPU, pooling_layer.cu, no padding): in TRAIN each window outputs one of its
// elements, drawn with probability proportional to its value (the inputs should be >= 0, as
// after a ReLU), and Backward routes the gradient to it; in TEST it outputs the
// probability-weighted average sum(x^2) / sum(x) (0 for an all-zero window). Difference from
// Caffe: Backward in TEST is the gradient of that average (Caffe reuses stale TRAIN choices).
#pragma once

#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class PoolingLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Pooling"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override {
    return param_.pooling_param().pool() == caffe::PoolingParameter::MAX ? 2 : 1;
  }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  // MAX and AVE with one top on the GPU (STOCHASTIC and the mask top stay float32).
  bool TakesHalfTensors() const override {
    const auto pool = param_.pooling_param().pool();
    return (pool == caffe::PoolingParameter::MAX || pool == caffe::PoolingParameter::AVE) &&
           param_.top_size() == 1;
  }
  // Either layout on each side; but a top of more than one position takes the bottom's layout,
  // since threads follow the top's order and a bottom in the other layout would be read apart
  // (global pooling's top is the same bytes in both layouts, so it stays free).
  NhwcUse NhwcTensors() const override {
    if (!TakesHalfTensors()) return NhwcUse::kNo;
    return pooled_h_ * pooled_w_ == 1 ? NhwcUse::kEach : NhwcUse::kSame;
  }
  // On the CPU, MAX and AVE with one top read and write channel blocks on either side (a block's
  // channels in vector lanes, each window visited in the NCHW pass's order: the same bits).
  NhwcUse BlockedTensors() const override {
    return TakesHalfTensors() ? NhwcUse::kEach : NhwcUse::kNo;
  }
  NhwcUse PaddedBlockedTensors() const override { return BlockedTensors(); }

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  void ThrowIfStochastic() const;
  // Forward (or Backward) when the bottom or the top is kept in channel blocks
  // (Tensor::cpu_block).
  void PassBlocks(bool forward, Tensor* bottom, Tensor* top);

  caffe::PoolingParameter::PoolMethod pool_ = caffe::PoolingParameter::MAX;
  bool global_ = false;
  int kernel_h_ = 0, kernel_w_ = 0;
  int stride_h_ = 1, stride_w_ = 1;
  int pad_h_ = 0, pad_w_ = 0;
  int channels_ = 0, height_ = 0, width_ = 0;
  int pooled_h_ = 0, pooled_w_ = 0;
  // Argmax per output when MAX runs without a mask top.
  std::vector<int> max_idx_;
  // GPU, one per output: the index (h * W + w, as float) of MAX's maximum when there is no
  // mask top, or of the element STOCHASTIC drew in TRAIN. For MAX without a mask top whose
  // window holds at most 255 values, one byte per output instead (its place in the window).
  Tensor gpu_index_;
  bool MaxOffsetsFit() const { return kernel_h_ * kernel_w_ <= 255; }
};

}  // namespace cortado
