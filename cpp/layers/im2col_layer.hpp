// SPDX-License-Identifier: Apache-2.0
// Im2col (Caffe type "Im2col"): unrolls each image into the column matrix a convolution
// multiplies by its weights (math::Im2col): top[n, (c * kh + i) * kw + j, oh, ow] =
// bottom[n, c, oh * stride_h - pad_h + i * dilation_h, ow * stride_w - pad_w + j * dilation_w],
// 0 where that falls in the padding. N-D (any number of spatial axes) works the same way.
//
// Params (convolution_param, read as Caffe's Im2colLayer reads them): kernel_size (required;
// once or once per spatial axis) or kernel_h + kernel_w (2-D), stride (default 1) or
// stride_h + stride_w, pad (default 0) or pad_h / pad_w, dilation (default 1; once or per
// axis), axis (default 1: the channel axis; axes before it are samples, after it spatial),
// force_nd_im2col (default false: 2-D inputs use the 2-D routine). num_output, bias and the
// fillers are ignored; there are no blobs.
// Bottom: [samples..., C, spatial...] with at least one spatial axis.
// Top: [samples..., C * prod(kernel), out...] with out = (in + 2 pad - (dilation (k - 1) + 1)) /
// stride + 1 (so (N, C * kh * kw, out_h, out_w) in 2-D); not the bottom itself.
// Backward: col2im, which adds each column entry back to the pixel it came from.
// Differences from Caffe: zero dilation, a dilated kernel larger than the padded input (as the
// Convolution layer refuses it), a top over INT_MAX elements and
// a changed number of axes after setup are errors naming the layer (Caffe aborts or computes
// garbage); Backward honours propagate_down (Caffe always computes the bottom diff). On the GPU
// N-D unrolling handles up to 6 spatial axes (math/gpu.hpp).
#pragma once

#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class Im2colLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Im2col"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool BackwardReadsBottomData(int /*index*/) const override { return false; }
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  // Whether the 2-D routines run (two spatial axes and no force_nd_im2col), as Caffe decides.
  bool Use2d() const { return !force_nd_im2col_ && num_spatial_axes_ == 2; }

  std::vector<int> kernel_shape_, stride_, pad_, dilation_;
  std::vector<int> image_shape_;   // {C, spatial...} of one image of the bottom
  std::vector<int> column_shape_;  // {C * prod(kernel), out...} of one image of the top
  int channel_axis_ = 1;
  int num_spatial_axes_ = 2;
  bool force_nd_im2col_ = false;
  int num_ = 0;         // images: product of the axes before the channel axis
  int bottom_dim_ = 0;  // floats per bottom image
  int top_dim_ = 0;     // floats per top image
};

}  // namespace cortado
