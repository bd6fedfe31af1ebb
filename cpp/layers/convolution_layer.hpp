// SPDX-License-Identifier: Apache-2.0
// Convolution (Caffe type "Convolution"): cross-correlation of each bottom with learned
// filters, plus an optional bias.
// Params: convolution_param (see base_conv_layer.hpp): num_output, bias_term, kernel_size,
// pad, stride, dilation (or the _h/_w forms), group, axis, force_nd_im2col, weight_filler,
// bias_filler.
// Bottoms: one or more of shape [N..., C, S_1, ..., S_d] (axes before `axis` are samples), all
// the same shape. Tops: one per bottom, [N..., num_output, O_1, ..., O_d] with
// O_i = (S_i + 2 * pad_i - (dilation_i * (kernel_i - 1) + 1)) / stride_i + 1.
// Blobs: weights [num_output, C / group, kernel_1, ..., kernel_d], bias [num_output].
// Engines: convolution_param.engine CAFFE always uses im2col + GEMM (Caffe's method); DEFAULT
// (and CUDNN on the CPU) uses the fast CPU convolution (oneDNN, math/convolution.hpp) for 2-D
// convolutions over axis 1 when the build has it (all three passes: it was faster in each on
// every benchmark shape, bench/RESULTS.md), and im2col + GEMM otherwise. On a GPU context the same
// rule picks cuDNN (math::MakeGpuConvolution) or im2col + GEMM on the device
// (convolution_layer.cu). Differences from Caffe: none in results beyond float rounding (see
// base_conv_layer.hpp for how the batch is chunked into GEMMs); a kernel larger than the padded
// input is an error naming the shapes.
// Mixed precision: on cuDNN the layer takes half tensors (Layer::HalfTensors): its GPU passes
// read and write its bottoms' and tops' 16-bit views, while the weights, bias and their
// gradients stay float32 (math::MakeGpuConvolution).
#pragma once

#include <memory>

#include "layers/base_conv_layer.hpp"
#include "math/convolution.hpp"

namespace cortado {

class ConvolutionLayer final : public BaseConvolutionLayer {
 public:
  using BaseConvolutionLayer::BaseConvolutionLayer;
  const char* type() const override { return "Convolution"; }
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  // On a GPU context whose build has cuDNN, where the layer runs on it (not engine CAFFE, a 2-D
  // convolution over axis 1): the im2col + GEMM passes stay float32.
  bool TakesHalfTensors() const override;
  // cuDNN reads and writes either layout, the bottom's and the top's each their own (one bottom:
  // the plan is made for one pair of layouts).
  NhwcUse NhwcTensors() const override {
    return TakesHalfTensors() && param_.bottom_size() == 1 ? NhwcUse::kEach : NhwcUse::kNo;
  }
  // oneDNN likewise on the CPU, with blocked tensors (one bottom).
  NhwcUse BlockedTensors() const override {
    return fast_ != nullptr && !ctx_->device().is_cuda() && param_.bottom_size() == 1
               ? NhwcUse::kEach
               : NhwcUse::kNo;
  }
  NhwcUse PaddedBlockedTensors() const override { return BlockedTensors(); }

 protected:
  bool reverse_dimensions() const override { return false; }
  void ComputeOutputShape() override;
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  // Whether the geometry and engine take the fast path (oneDNN or cuDNN, where the build has it).
  bool WantsFastPath() const;

  // The fast path's plan for the current shape; null when im2col + GEMM is used.
  std::unique_ptr<math::ConvolutionPlan> fast_;
  math::ConvolutionShape fast_shape_;
  // The half type of the tensors fast_ was made for (HalfTensors() then; kNone: float32).
  HalfType fast_half_ = HalfType::kNone;
  // The layouts of the bottom and top fast_ was made for (channels-last half tensors; the net
  // sets them after Setup, so the GPU passes remake a plan whose layouts no longer match).
  math::HalfTensorLayouts fast_layouts_;
  static math::HalfTensorLayouts LayoutsOf(const std::vector<Tensor*>& bottom,
                                           const std::vector<Tensor*>& top);
  // The same for the CPU: the bottom's and top's channel blocks (Tensor::cpu_block).
  math::CpuBlocks fast_blocks_;
  static math::CpuBlocks BlocksOf(const std::vector<Tensor*>& bottom,
                                  const std::vector<Tensor*>& top);
};

}  // namespace cortado
