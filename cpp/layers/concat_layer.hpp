// SPDX-License-Identifier: Apache-2.0
// Concat (Caffe type "Concat"): joins its bottoms along one axis.
// Params: concat_param.axis (default 1, negative counts from the end) or the legacy
// concat_param.concat_dim (non-negative only); giving both is an error.
// Bottoms: one or more, with the same number of axes and the same dimensions except on the
// concat axis. Top: one, whose concat-axis dimension is the sum of the bottoms'.
// With a single bottom the top shares the bottom's data and diff (as Caffe).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ConcatLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Concat"; }
  int MinBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int concat_axis_ = 1;
  int num_concats_ = 0;        // product of the dimensions before the concat axis
  int concat_input_size_ = 0;  // product of the dimensions after it
};

}  // namespace cortado
