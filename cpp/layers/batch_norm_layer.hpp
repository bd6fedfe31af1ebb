// SPDX-License-Identifier: Apache-2.0
// BatchNorm (Caffe type "BatchNorm"): normalises each channel (axis 1) of its bottom to zero
// mean and unit variance: top = (x - mean) / sqrt(var + eps). No learned affine part: put a
// Scale layer with bias_term after it, as in Caffe.
// Params: batch_norm_param.use_global_stats (unset: false in TRAIN, true in TEST): use the
// stored statistics instead of this batch's; moving_average_fraction (default 0.999); eps
// (default 1e-5).
// Param blobs, as Caffe: [0] running mean sum (C), [1] running variance sum (C), [2] the
// 1-element normaliser; the statistics are blobs[0] / blobs[2] and blobs[1] / blobs[2]. Each
// training forward does blobs[2] = f * blobs[2] + 1, blobs[0] = f * blobs[0] + batch mean,
// blobs[1] = f * blobs[1] + m / (m - 1) * batch variance, m = count / C. They are not learned:
// param_propagate_down is false and every ParamSpec gets lr_mult 0 (a nonzero one is an error).
// Bottom: one, N x C x ... (at least 2 axes). Top: one of the same shape; may be in-place.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class BatchNormLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "BatchNorm"; }
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
  bool use_global_stats_ = false;
  float moving_average_fraction_ = 0.999f;
  float eps_ = 1e-5f;
  int channels_ = 0;
  int num_ = 0;              // bottom shape(0)
  int spatial_dim_ = 0;      // product of the dimensions after the channel axis
  std::vector<float> mean_;  // per channel, of the last forward
  std::vector<float> std_;   // per channel: sqrt(var + eps) of the last forward
  Tensor x_norm_;            // the normalised output, kept for Backward (top may be in-place)
  // GPU passes: per channel on the device, rows [0] mean and [1] std of the last forward,
  // [2] mean(dy) and [3] mean(dy * y) of the last backward.
  Tensor gpu_stats_;
};

}  // namespace cortado
