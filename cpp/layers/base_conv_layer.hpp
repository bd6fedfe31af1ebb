// SPDX-License-Identifier: Apache-2.0
// BaseConvolutionLayer: what Convolution and Deconvolution share (Caffe's BaseConvolutionLayer).
// Not registered; the two concrete layers derive from it.
//
// Params (convolution_param): num_output, bias_term, kernel_size / pad / stride (one value for
// all spatial axes or one per axis) or kernel_h/kernel_w, pad_h/pad_w, stride_h/stride_w (2-D
// only), dilation (repeated), group, axis (the channel axis; earlier axes are samples, later
// ones spatial), force_nd_im2col, weight_filler, bias_filler. engine is ignored.
// Bottoms and tops: one or more each, bottom i -> top i with shared weights; all bottoms have
// the same shape.
//
// The convolution is computed in "conv" terms: an input image with conv_in_channels_ channels
// is unrolled by im2col into a (conv_in_channels_ * prod(kernel)) x conv_out_spatial_dim_
// matrix, and the output (conv_out_channels_ x conv_out_spatial_dim_) is weights x columns.
// Convolution maps bottom (input) -> top (output); Deconvolution runs the same product
// transposed, so for it the top is the conv "input" and the bottom the conv "output".
//
// Difference from Caffe (in speed and memory only, results are the same): small images are
// unrolled side by side into one wide column matrix, so one GEMM covers several images (up to
// a cache-sized column block, see base_conv_layer.cpp); big images go one per GEMM as in
// Caffe. A 1x1 kernel with stride 1 and no pad skips im2col. The column workspace is per
// thread and shared by all convolution layers run on that thread, not one per layer.
// On the GPU (base_conv_layer.cu) images go one per GEMM as in Caffe, and the columns live in
// the context's CUDA workspace.
#pragma once

#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class BaseConvolutionLayer : public Layer {
 public:
  using Layer::Layer;
  int MinBottomBlobs() const override { return 1; }
  int MinTopBlobs() const override { return 1; }
  bool EqualNumBottomTopBlobs() const override { return true; }

  // Reads the geometry, checks it against bottom[0], and creates + fills the weight (and
  // bias) blobs, or checks the shapes of blobs that are already there.
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  // The gradients need the input and the top's diff, never the output.
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

 protected:
  // True for deconvolution: the conv input is the top and the conv output the bottom.
  virtual bool reverse_dimensions() const = 0;
  // Fills output_shape_ (top spatial shape) from the bottom's spatial shape; throws
  // kInvalidArgument when a dimension would not be positive.
  virtual void ComputeOutputShape() = 0;

  // The three products over `num` consecutive images. `input` points at images of conv_in
  // shape (conv_input_dim_ floats each), `output` at conv outputs (conv_output_dim_ each).
  // output = weights * im2col(input), overwriting output.
  void ForwardGemm(const float* input, const float* weights, float* output, int num);
  // input = col2im(weights^T * output), overwriting input.
  void BackwardGemm(const float* output, const float* weights, float* input, int num);
  // weight_diff += output * im2col(input)^T.
  void WeightGemm(const float* input, const float* output, float* weight_diff, int num);
  // top[n, c, :] += bias[c] for num images of num_output_ x out_spatial_dim_.
  void ForwardBias(const float* bias, float* top, int num) const;
  // bias_diff[c] += sum over images and positions of top_diff[n, c, :].
  void BackwardBias(const float* top_diff, float* bias_diff, int num) const;

#if CORTADO_WITH_CUDA
  // The GPU versions (base_conv_layer.cu), one image at a time as Caffe: im2col into the
  // context's workspace, then one GEMM per group. Device pointers.
  // The column matrix of one conv-input image: the image itself for a 1x1 convolution, else
  // its im2col in the workspace (valid until the next call that uses the workspace).
  const float* ColumnsGpu(const float* input);
  // output = weights * columns, overwriting output.
  void ForwardGemmGpu(const float* columns, const float* weights, float* output);
  // input = col2im(weights^T * output), overwriting input.
  void BackwardGemmGpu(const float* output, const float* weights, float* input);
  // weight_diff += output * columns^T.
  void WeightGemmGpu(const float* columns, const float* output, float* weight_diff);
  // ForwardBias and BackwardBias over all num_ images of a top.
  void ForwardBiasGpu(const float* bias, float* top);
  void BackwardBiasGpu(const float* top_diff, float* bias_diff);
  // Offsets of image n in a conv-input / conv-output buffer.
  size_t conv_input_offset(int n) const { return static_cast<size_t>(n) * conv_input_dim_; }
  size_t conv_output_offset(int n) const { return static_cast<size_t>(n) * conv_output_dim_; }
#endif

  // Geometry, per spatial axis.
  std::vector<int> kernel_shape_, stride_, pad_, dilation_;
  // Spatial shape of bottom[0] and of the tops.
  std::vector<int> input_shape_, output_shape_;
  int channel_axis_ = 1;
  int num_spatial_axes_ = 2;
  int num_output_ = 0;
  int channels_ = 0;
  int group_ = 1;
  bool bias_term_ = true;
  bool is_1x1_ = false;
  bool force_nd_im2col_ = false;
  int num_ = 0;              // images per bottom: product of the axes before channel_axis_
  int out_spatial_dim_ = 0;  // top spatial size (for the bias)

 private:
  // Unrolls `count` images starting at `input` into columns [rows, count * spatial], row-major.
  void BuildColumns(const float* input, int count, float* columns, float* scratch) const;
  // The reverse: accumulates nothing, overwrites each image of `input` from its columns.
  void ScatterColumns(const float* columns, int count, float* input, float* scratch) const;
  // Images per GEMM chunk.
  int ChunkSize(int num) const;
  std::string GeometryString() const;

  int conv_in_channels_ = 0;
  int conv_out_channels_ = 0;
  int conv_out_spatial_dim_ = 0;  // columns per image
  int conv_in_spatial_dim_ = 0;
  int kernel_dim_ = 0;  // rows of the column matrix per group
  int conv_input_dim_ = 0;
  int conv_output_dim_ = 0;
  std::vector<int> conv_input_shape_;  // {conv_in_channels_, spatial...}
  std::vector<int> col_shape_;         // {kernel_dim_ * group_, conv output spatial...}
};

}  // namespace cortado
