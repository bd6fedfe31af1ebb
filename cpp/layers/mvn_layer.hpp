// SPDX-License-Identifier: Apache-2.0
// MVN (Caffe type "MVN", mean-variance normalization): per sample and channel (or per sample
// across channels), y = x - mean, and with normalize_variance y = (x - mean) / (std + eps),
// where std = sqrt(mean((x - mean)^2)) and eps is added after the square root, as Caffe does.
//
// Params (mvn_param): normalize_variance (default true), across_channels (default false),
// eps (default 1e-9).
// Bottom: one tensor of at most 4 axes, read as Caffe's legacy N x C x H x W (missing trailing
// axes count as 1). Rows are N * C groups of H * W values, or N groups of C * H * W with
// across_channels.
// Top: shape N x C x H x W (always 4 axes, as Caffe reshapes it); may be the bottom itself.
// Backward (Caffe's formula, which treats std + eps as the divisor):
//   normalize_variance: dx = (dy - mean(dy) - y * mean(dy * y)) / (std + eps)
//   otherwise:          dx = dy - mean(dy)
// with the means taken over each row. Sums run in double; results agree with Caffe's float
// BLAS sums to float rounding.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class MVNLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "MVN"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool BackwardReadsBottomData(int /*index*/) const override { return false; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int num_ = 0;  // rows
  int dim_ = 0;  // values per row
  Tensor std_;   // per row: std + eps, from Forward (normalize_variance only)
};

}  // namespace cortado
