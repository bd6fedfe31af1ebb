// SPDX-License-Identifier: Apache-2.0
// Reduction (Caffe type "Reduction"): reduces all axes from `axis` to the end, per position of
// the axes before it, to one value: SUM (sum x), ASUM (sum |x|), SUMSQ (sum x^2) or MEAN
// (sum x / count), times coeff.
//
// Params (reduction_param): operation (default SUM), axis (default 0; negative counts from the
// end), coeff (default 1).
// Bottom: one tensor with at least one axis. Top: the bottom's shape up to `axis` (a 0-axis
// scalar for axis 0); not the bottom itself.
// Backward: dx = coeff * dy_row * (1 for SUM, 1/count for MEAN, sign(x) for ASUM with
// sign(0) = 0, 2x for SUMSQ).
// Sums run in double (Caffe sums in the blob's type with BLAS); results agree to float rounding.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ReductionLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Reduction"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool BackwardReadsBottomData(int /*index*/) const override {
    const auto op = param_.reduction_param().operation();
    return op == caffe::ReductionParameter::ASUM || op == caffe::ReductionParameter::SUMSQ;
  }
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  caffe::ReductionParameter::ReductionOp op_ = caffe::ReductionParameter::SUM;
  int num_ = 0;         // rows: product of the axes before `axis`
  int dim_ = 0;         // elements reduced per row
  float coeff_ = 1.0f;  // coeff, divided by dim_ for MEAN
};

}  // namespace cortado
