// SPDX-License-Identifier: Apache-2.0
// A fast 2-D convolution for the CPU behind a small interface, so layers never call oneDNN
// directly. A plan is made once per shape (primitive creation is costly) and run many times.
//
// Layouts are Caffe's: src [N, C, H, W], weights [OC, C/group, KH, KW], bias [OC],
// dst [N, OC, OH, OW], with Caffe's output size (floor((H + 2*pad - dilated kernel)/stride) + 1).
#pragma once

#include <memory>
#include <string>

#include "core/context.hpp"
#include "core/error.hpp"
#include "core/half_type.hpp"

namespace cortado::math {

struct ConvolutionShape {
  int num = 0, channels = 0, height = 0, width = 0;
  int num_output = 0;
  int kernel_h = 1, kernel_w = 1;
  int pad_h = 0, pad_w = 0;
  int stride_h = 1, stride_w = 1;
  int dilation_h = 1, dilation_w = 1;
  int group = 1;
  bool bias = true;

  int output_h() const {
    return (height + 2 * pad_h - (dilation_h * (kernel_h - 1) + 1)) / stride_h + 1;
  }
  int output_w() const {
    return (width + 2 * pad_w - (dilation_w * (kernel_w - 1) + 1)) / stride_w + 1;
  }
  bool operator==(const ConvolutionShape& o) const;
  bool operator!=(const ConvolutionShape& o) const { return !(*this == o); }
};

class ConvolutionPlan {
 public:
  virtual ~ConvolutionPlan() = default;
  // dst = conv(src, weights) + bias (bias ignored when the shape has none).
  virtual void Forward(const float* src, const float* weights, const float* bias, float* dst) = 0;
  // diff_src = the gradient of the loss with respect to src (overwritten).
  virtual void BackwardData(const float* diff_dst, const float* weights, float* diff_src) = 0;
  // diff_weights += dL/dweights and diff_bias += dL/dbias (accumulated, as layers do).
  virtual void BackwardWeights(const float* src, const float* diff_dst, float* diff_weights,
                               float* diff_bias) = 0;
  // Both backward passes of one layer, as BackwardWeights then BackwardData would do them;
  // either is left out where its output is null (diff_bias alone, without diff_weights, is not
  // computed here). A plan may share work between the two (the oneDNN plan puts diff_dst in its
  // blocked layout once for both).
  virtual void Backward(const float* src, const float* diff_dst, const float* weights,
                        float* diff_weights, float* diff_bias, float* diff_src) {
    if (diff_weights != nullptr) BackwardWeights(src, diff_dst, diff_weights, diff_bias);
    if (diff_src != nullptr) BackwardData(diff_dst, weights, diff_src);
  }
  // The implementation chosen, for logs ("oneDNN jit:avx2").
  virtual std::string Name() const = 0;

  // The same three passes on half tensors (Layer::HalfTensors), for a plan made for them
  // (MakeGpuConvolution's half_tensors): src, dst and their gradients are NCHW values of the
  // plan's 16-bit type; weights, bias and their gradients stay float32 and are used as above.
  // Other plans throw kInternal.
  virtual void ForwardHalf(const void* /*src*/, const float* /*weights*/, const float* /*bias*/,
                           void* /*dst*/) {
    CORTADO_THROW(kInternal, "{}: not a plan for half tensors", Name());
  }
  virtual void BackwardDataHalf(const void* /*diff_dst*/, const float* /*weights*/,
                                void* /*diff_src*/) {
    CORTADO_THROW(kInternal, "{}: not a plan for half tensors", Name());
  }
  virtual void BackwardWeightsHalf(const void* /*src*/, const void* /*diff_dst*/,
                                   float* /*diff_weights*/, float* /*diff_bias*/) {
    CORTADO_THROW(kInternal, "{}: not a plan for half tensors", Name());
  }
};

// The layouts of a CPU plan's tensors: src (and diff_src) and dst (and diff_dst) in NCHW (0)
// or in oneDNN's blocked nChw{block}c (8 or 16; Tensor::cpu_block), which its convolutions read
// and write without reordering when it is the layout they choose (CpuChannelBlock).
struct CpuBlocks {
  int src = 0;
  int dst = 0;
  bool operator==(const CpuBlocks& o) const { return src == o.src && dst == o.dst; }
  bool operator!=(const CpuBlocks& o) const { return !(*this == o); }
};

// A plan for `shape`, or nullptr when no fast implementation exists in this build or for this
// shape (the caller then uses im2col + GEMM).
std::unique_ptr<ConvolutionPlan> MakeFastConvolution(const ConvolutionShape& shape,
                                                     CpuBlocks blocks = {});

// How oneDNN's CPU convolutions compute 3x3 kernels: kAuto (the default) uses Winograd's
// F(4x4, 3x3) where WinogradSuits says so and oneDNN offers it on this CPU (AVX-512), the direct
// algorithm elsewhere; kDirect never uses Winograd; kWinograd uses it wherever oneDNN offers it
// (tests). Winograd's transforms round differently from a direct sum (about 1e-6 of the result's
// scale in float32, as cuDNN's Winograd algorithms do on a GPU); the choice is made from the
// shape alone, so the same net gives the same bits on the same machine, run after run.
enum class CpuConvAlgorithm { kAuto, kDirect, kWinograd };
// CORTADO_CPU_CONV=auto|direct|winograd, read once per process (default auto; another value is
// kInvalidArgument), unless SetCpuConvAlgorithm has set it since.
CpuConvAlgorithm CpuConvolutionAlgorithm();
// Makes the plans made from now on use `algorithm`; returns the one before. Plans already made
// keep theirs.
CpuConvAlgorithm SetCpuConvAlgorithm(CpuConvAlgorithm algorithm);
// kAuto's rule: a 3x3 kernel with stride 1, no dilation and no groups, at least 64 input and 64
// output channels, and at least 64 output tiles of 4x4 over the batch. Below that the
// transforms cost more than the multiplies saved (measured with oneDNN 2.6 on AVX-512, 2
// threads: ResNet-50's 3x3 layers at batch 8 take 0.53-0.6 of the direct time at 56x56 to 14x14,
// 0.9 at 7x7 and 2.1 at 7x7 with batch 2; 16 or 32 channels are slower than direct;
// bench/history/cpu-pytorch.md).
bool WinogradSuits(const ConvolutionShape& shape);

// The channel block oneDNN's CPU convolutions keep activations in on this machine (16 with
// AVX-512, 8 with AVX2), or 0: none, or a build without oneDNN. Asked once per process;
// CORTADO_CPU_BLOCKS=0 makes it 0 (nets then keep every blob NCHW).
int CpuChannelBlock();

// The same on the GPU of `ctx` (cuDNN; device pointers, work queued on the context's stream),
// or nullptr in a build without cuDNN. The plan picks each pass's algorithm once, by timing
// cuDNN's candidates within the workspace limit (CORTADO_CUDNN_WORKSPACE_MB, default 1024), and
// runs in strict float32, as Caffe and the CPU path compute, unless the context allows TF32
// (Context::allow_tf32) or has a half type (Context::half_compute: the operands are rounded to
// it, in NHWC, and the sums kept in float32; pointers and results stay float32 NCHW).
// With half_tensors (a 16-bit type, the layer's Layer::HalfTensors) the plan is for the *Half
// passes instead: it computes in that type whatever the shape (there are no float32 copies to
// save), in the layout HalfTensorConvLayout() gives when the plan is made.
// Half tensors may be kept channels-last (Tensor::home_nhwc): src_nhwc (the input and its
// gradient) and dst_nhwc (the output and its gradient) say which are. A plan with either runs
// cuDNN in NHWC and reads and writes those tensors themselves, with no copies; only an NCHW side
// is transposed (as kNhwc below transposes both).
struct HalfTensorLayouts {
  bool src_nhwc = false;
  bool dst_nhwc = false;
  bool operator==(const HalfTensorLayouts& o) const {
    return src_nhwc == o.src_nhwc && dst_nhwc == o.dst_nhwc;
  }
  bool operator!=(const HalfTensorLayouts& o) const { return !(*this == o); }
};
std::unique_ptr<ConvolutionPlan> MakeGpuConvolution(Context& ctx, const ConvolutionShape& shape,
                                                    HalfType half_tensors = HalfType::kNone,
                                                    HalfTensorLayouts layouts = {});

// How a convolution on half tensors lays out what cuDNN reads and writes: kNhwc transposes the
// NCHW tensors into NHWC copies in the context's half scratch and the results back (tensor
// cores' native layout), kNchw runs cuDNN on the tensors themselves, and kAuto (the default)
// picks per shape: NHWC where the convolution does at least 256 multiply-adds per element it
// would transpose (2 (C / group) K R S / (C + K)), NCHW below, where the transposes cost more
// than the layout saves (ResNet-50's 1x1 convolutions; bench/RESULTS.md). CUDA builds only.
enum class HalfConvLayout { kAuto, kNhwc, kNchw };
// CORTADO_HALF_CONV_LAYOUT=auto|nhwc|nchw, read once per process (default auto; another value
// is kInvalidArgument), unless SetHalfTensorConvLayout has set it since.
HalfConvLayout HalfTensorConvLayout();
// Makes the plans made from now on use `layout` (tests run both in one process); returns the
// layout before. Plans already made keep theirs.
HalfConvLayout SetHalfTensorConvLayout(HalfConvLayout layout);

}  // namespace cortado::math
