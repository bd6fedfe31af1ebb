// SPDX-License-Identifier: Apache-2.0
#include "layers/convolution_layer.hpp"

#include "core/config.hpp"
#include "core/logging.hpp"

namespace cortado {

void ConvolutionLayer::ComputeOutputShape() {
  output_shape_.resize(num_spatial_axes_);
  for (int i = 0; i < num_spatial_axes_; ++i) {
    const int extent = dilation_[i] * (kernel_shape_[i] - 1) + 1;
    const int padded = input_shape_[i] + 2 * pad_[i];
    if (padded < extent) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: kernel extent {} (kernel {}, dilation {}) is larger than the padded "
                    "input {} (size {} + 2 * pad {}) on axis {}; bottom spatial shape {}",
                    Describe(), extent, kernel_shape_[i], dilation_[i], padded, input_shape_[i],
                    pad_[i], channel_axis_ + 1 + i, fmt::join(std::vector<int>(input_shape_), " "));
    }
    output_shape_[i] = (padded - extent) / stride_[i] + 1;
  }
}

// engine CAFFE keeps im2col + GEMM on either device; otherwise the fast path of the context's
// device: oneDNN on the CPU, cuDNN on a GPU (each when the build has it).
bool ConvolutionLayer::WantsFastPath() const {
  return param_.convolution_param().engine() != caffe::ConvolutionParameter::CAFFE &&
         num_spatial_axes_ == 2 && channel_axis_ == 1;
}

bool ConvolutionLayer::TakesHalfTensors() const {
  return CORTADO_WITH_CUDNN && ctx_->device().is_cuda() && WantsFastPath();
}

math::HalfTensorLayouts ConvolutionLayer::LayoutsOf(const std::vector<Tensor*>& bottom,
                                                    const std::vector<Tensor*>& top) {
  math::HalfTensorLayouts layouts;
  if (!bottom.empty() && !top.empty()) {
    layouts.src_nhwc = bottom[0]->home_nhwc();
    layouts.dst_nhwc = top[0]->home_nhwc();
  }
  return layouts;
}

math::CpuBlocks ConvolutionLayer::BlocksOf(const std::vector<Tensor*>& bottom,
                                           const std::vector<Tensor*>& top) {
  math::CpuBlocks blocks;
  if (bottom.size() == 1 && top.size() == 1) {
    blocks.src = bottom[0]->cpu_block();
    blocks.dst = top[0]->cpu_block();
  }
  return blocks;
}

void ConvolutionLayer::Reshape(const std::vector<Tensor*>& bottom,
                               const std::vector<Tensor*>& top) {
  BaseConvolutionLayer::Reshape(bottom, top);
  if (!WantsFastPath()) {
    fast_.reset();
    fast_half_ = HalfType::kNone;
    return;
  }
  math::ConvolutionShape shape;
  shape.num = num_;
  shape.channels = channels_;
  shape.height = input_shape_[0];
  shape.width = input_shape_[1];
  shape.num_output = num_output_;
  shape.kernel_h = kernel_shape_[0];
  shape.kernel_w = kernel_shape_[1];
  shape.pad_h = pad_[0];
  shape.pad_w = pad_[1];
  shape.stride_h = stride_[0];
  shape.stride_w = stride_[1];
  shape.dilation_h = dilation_[0];
  shape.dilation_w = dilation_[1];
  shape.group = group_;
  shape.bias = bias_term_;
  const HalfType half = HalfTensors();
  const math::HalfTensorLayouts layouts = LayoutsOf(bottom, top);
  const math::CpuBlocks blocks = BlocksOf(bottom, top);
  if (fast_ && shape == fast_shape_ && half == fast_half_ && layouts == fast_layouts_ &&
      blocks == fast_blocks_) {
    return;
  }
#if CORTADO_WITH_CUDA
  fast_ = ctx_->device().is_cuda() ? math::MakeGpuConvolution(*ctx_, shape, half, layouts)
                                   : math::MakeFastConvolution(shape, blocks);
#else
  fast_ = math::MakeFastConvolution(shape, blocks);
#endif
  fast_shape_ = shape;
  fast_layouts_ = layouts;
  fast_blocks_ = blocks;
  // A build without cuDNN has no plan for half tensors (nor takes them).
  fast_half_ = fast_ != nullptr ? half : HalfType::kNone;
  CORTADO_LOG_DEBUG("{}: {}", Describe(), fast_ ? fast_->Name() : std::string("im2col + GEMM"));
}

void ConvolutionLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                  const std::vector<Tensor*>& top) {
  // The net sets channel blocks after Setup: a plan for other layouts is made again.
  if (fast_ && BlocksOf(bottom, top) != fast_blocks_) Reshape(bottom, top);
  const float* weights = blobs_[0]->cpu_data();
  if (fast_) {
    const float* bias = bias_term_ ? blobs_[1]->cpu_data() : nullptr;
    for (size_t i = 0; i < bottom.size(); ++i) {
      // A blocked tensor's home is in the plan's layout (the NCHW views are for other layers).
      const float* src = fast_blocks_.src != 0 ? bottom[i]->cpu_home_data() : bottom[i]->cpu_data();
      float* dst =
          fast_blocks_.dst != 0 ? top[i]->mutable_cpu_home_data() : top[i]->mutable_cpu_data();
      fast_->Forward(src, weights, bias, dst);
    }
    return;
  }
  for (size_t i = 0; i < bottom.size(); ++i) {
    float* top_data = top[i]->mutable_cpu_data();
    ForwardGemm(bottom[i]->cpu_data(), weights, top_data, num_);
    if (bias_term_) ForwardBias(blobs_[1]->cpu_data(), top_data, num_);
  }
}

void ConvolutionLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                   const std::vector<bool>& propagate_down,
                                   const std::vector<Tensor*>& bottom) {
  if (fast_ && BlocksOf(bottom, top) != fast_blocks_) Reshape(bottom, top);
  const float* weights = blobs_[0]->cpu_data();
  for (size_t i = 0; i < top.size(); ++i) {
    const bool bias_diff = bias_term_ && param_propagate_down(1);
    if (fast_) {
      const bool weight_diff = param_propagate_down(0);
      const bool src_blocked = fast_blocks_.src != 0;
      const float* top_diff = fast_blocks_.dst != 0 ? top[i]->cpu_home_diff() : top[i]->cpu_diff();
      if (bias_diff && !weight_diff) {
        // Caffe's bias pass reads NCHW (the twin when the top is blocked).
        BackwardBias(top[i]->cpu_diff(), blobs_[1]->mutable_cpu_diff(), num_);
      }
      fast_->Backward(src_blocked ? bottom[i]->cpu_home_data() : bottom[i]->cpu_data(), top_diff,
                      weights, weight_diff ? blobs_[0]->mutable_cpu_diff() : nullptr,
                      weight_diff && bias_diff ? blobs_[1]->mutable_cpu_diff() : nullptr,
                      !propagate_down[i] ? nullptr
                      : src_blocked      ? bottom[i]->mutable_cpu_home_diff()
                                         : bottom[i]->mutable_cpu_diff());
      continue;
    }
    const float* top_diff = top[i]->cpu_diff();
    if (bias_diff) BackwardBias(top_diff, blobs_[1]->mutable_cpu_diff(), num_);
    if (param_propagate_down(0)) {
      WeightGemm(bottom[i]->cpu_data(), top_diff, blobs_[0]->mutable_cpu_diff(), num_);
    }
    if (propagate_down[i]) BackwardGemm(top_diff, weights, bottom[i]->mutable_cpu_diff(), num_);
  }
}

CORTADO_REGISTER_LAYER(Convolution, ConvolutionLayer);

}  // namespace cortado
