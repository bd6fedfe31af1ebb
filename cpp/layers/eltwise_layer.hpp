// SPDX-License-Identifier: Apache-2.0
// Eltwise (Caffe type "Eltwise"): combines bottoms of identical shape element by element.
// Params: eltwise_param.operation PROD, SUM (default) or MAX; eltwise_param.coeff (SUM only:
// none, or one per bottom; default 1); eltwise_param.stable_prod_grad (default true: the PROD
// gradient for bottom i multiplies the other bottoms instead of dividing top by bottom i,
// which would fail where bottom i is 0).
// Bottoms: two or more, all of one shape. Top: one of that shape.
// MAX keeps the index of the winning bottom per element for Backward; ties between bottoms 0
// and 1 go to bottom 1, later ties to the earlier bottom (as Caffe).
#pragma once

#include <algorithm>

#include "layers/layer.hpp"

namespace cortado {

class EltwiseLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Eltwise"; }
  int MinBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  // Computes the in-place ReLU (negative_slope >= 0) that follows a SUM as part of it
  // (Net::Init fuses; the ReLU layer then does nothing): Forward writes relu(sum), Backward
  // masks the top's gradient by the sign of the top, as the ReLU's own Backward would.
  void FuseRelu(float negative_slope);
  // Takes the top's gradient as the sum of two other tensors' diffs instead of its own diff: the
  // tops of the Split that alone consumes the top (Net::Init folds the Split's Backward into this
  // layer's, so the sum is never written out). The sum is taken as the Split's Backward takes
  // it, a + b in float32 (rounded to the 16-bit type of half tensors, as the Split would store
  // it), so the gradients are the same bits as with the Split. SUM only.
  void SumTopDiffs(const Tensor* a, const Tensor* b);
  bool sums_top_diffs() const { return top_diff_terms_[0] != nullptr; }
  // For a BatchNorm that computes this sum (BatchNormLayer::FoldSum): whether it is a SUM whose
  // coefficients are all 1, its fused ReLU and that ReLU's slope, and its Backward run on the
  // layer's device although the layer is fused (which Layer::Backward skips).
  bool plain_sum() const {
    return op_ == caffe::EltwiseParameter::SUM &&
           std::all_of(coeffs_.begin(), coeffs_.end(), [](float c) { return c == 1.0f; });
  }
  bool fused_relu() const { return relu_; }
  float relu_slope() const { return relu_slope_; }
  void BackwardForHost(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                       const std::vector<Tensor*>& bottom);
  // A sum's gradient is the coefficients alone (and the fused ReLU's sign of the top).
  bool BackwardReadsBottomData(int /*index*/) const override {
    return op_ != caffe::EltwiseParameter::SUM;
  }
  bool BackwardReadsTopData(int /*index*/) const override {
    return op_ != caffe::EltwiseParameter::SUM || relu_;
  }
  // A SUM of two bottoms (a ResNet's residual sum) on the GPU.
  bool TakesHalfTensors() const override {
    return param_.eltwise_param().operation() == caffe::EltwiseParameter::SUM &&
           param_.bottom_size() == 2;
  }
  NhwcUse NhwcTensors() const override {  // element by element: any layout, all alike
    return TakesHalfTensors() ? NhwcUse::kSame : NhwcUse::kNo;
  }
  NhwcUse BlockedTensors() const override { return NhwcUse::kSame; }  // likewise on the CPU

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  caffe::EltwiseParameter::EltwiseOp op_ = caffe::EltwiseParameter::SUM;
  std::vector<float> coeffs_;
  bool stable_prod_grad_ = true;
  bool relu_ = false;  // a fused ReLU (SUM only)
  float relu_slope_ = 0.0f;
  // SumTopDiffs: the two tensors whose diffs add up to the top's gradient (null: none).
  const Tensor* top_diff_terms_[2] = {nullptr, nullptr};
  std::vector<int> max_idx_;  // MAX only: which bottom won each element
  Tensor max_mask_;           // MAX on the GPU: the same, as floats on the device
};

}  // namespace cortado
