// SPDX-License-Identifier: Apache-2.0
// Deconvolution (Caffe type "Deconvolution"): the transpose of Convolution (its forward is
// Convolution's backward-data pass and vice versa), plus an optional bias. Used for learned
// upsampling (e.g. with a bilinear weight_filler).
// Params: convolution_param, read as by Convolution (see base_conv_layer.hpp).
// Bottoms: one or more of shape [N..., C, S_1, ..., S_d], all the same shape. Tops: one per
// bottom, [N..., num_output, O_1, ..., O_d] with
// O_i = stride_i * (S_i - 1) + dilation_i * (kernel_i - 1) + 1 - 2 * pad_i.
// Blobs: weights [C, num_output / group, kernel_1, ..., kernel_d] (Caffe's layout: the
// weights of the convolution this one transposes), bias [num_output].
// Differences from Caffe: none in results; a non-positive output size is an error naming the
// shapes.
#pragma once

#include "layers/base_conv_layer.hpp"

namespace cortado {

class DeconvolutionLayer final : public BaseConvolutionLayer {
 public:
  using BaseConvolutionLayer::BaseConvolutionLayer;
  const char* type() const override { return "Deconvolution"; }

 protected:
  bool reverse_dimensions() const override { return true; }
  void ComputeOutputShape() override;
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;
};

}  // namespace cortado
