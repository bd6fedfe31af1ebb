// SPDX-License-Identifier: Apache-2.0
// Convolution on the GPU: cuDNN (the plan Reshape made) for 2-D convolutions unless engine is
// CAFFE, else im2col + GEMM per image (base_conv_layer.cu). A plan made for half tensors reads
// and writes the bottoms' and tops' 16-bit views only: taking a float32 view would make a
// float32 copy of the activations, which half tensors are there to avoid. Half tensors kept
// channels-last (Tensor::home_nhwc) are passed as they are; the plan knows their layouts.
#include "layers/convolution_layer.hpp"

namespace cortado {

void ConvolutionLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                  const std::vector<Tensor*>& top) {
  if (fast_ && fast_half_ != HalfType::kNone && LayoutsOf(bottom, top) != fast_layouts_) {
    Reshape(bottom, top);
  }
  const float* weights = blobs_[0]->gpu_data();
  if (fast_) {
    const float* bias = bias_term_ ? blobs_[1]->gpu_data() : nullptr;
    const HalfType h = fast_half_;
    for (size_t i = 0; i < bottom.size(); ++i) {
      if (h != HalfType::kNone) {
        fast_->ForwardHalf(bottom[i]->gpu_half_data(h), weights, bias,
                           top[i]->mutable_gpu_half_data(h));
      } else {
        fast_->Forward(bottom[i]->gpu_data(), weights, bias, top[i]->mutable_gpu_data());
      }
    }
    return;
  }
  for (size_t i = 0; i < bottom.size(); ++i) {
    const float* bottom_data = bottom[i]->gpu_data();
    float* top_data = top[i]->mutable_gpu_data();
    for (int n = 0; n < num_; ++n) {
      ForwardGemmGpu(ColumnsGpu(bottom_data + conv_input_offset(n)), weights,
                     top_data + conv_output_offset(n));
    }
    if (bias_term_) ForwardBiasGpu(blobs_[1]->gpu_data(), top_data);
  }
}

void ConvolutionLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                   const std::vector<bool>& propagate_down,
                                   const std::vector<Tensor*>& bottom) {
  if (fast_ && fast_half_ != HalfType::kNone && LayoutsOf(bottom, top) != fast_layouts_) {
    Reshape(bottom, top);
  }
  const float* weights = blobs_[0]->gpu_data();
  for (size_t i = 0; i < top.size(); ++i) {
    if (fast_ && fast_half_ != HalfType::kNone) {
      const HalfType h = fast_half_;
      const void* top_diff = top[i]->gpu_half_diff(h);
      const bool bias_diff = bias_term_ && param_propagate_down(1);
      if (param_propagate_down(0) || bias_diff) {
        fast_->BackwardWeightsHalf(
            bottom[i]->gpu_half_data(h), top_diff,
            param_propagate_down(0) ? blobs_[0]->mutable_gpu_diff() : nullptr,
            bias_diff ? blobs_[1]->mutable_gpu_diff() : nullptr);
      }
      if (propagate_down[i]) {
        fast_->BackwardDataHalf(top_diff, weights, bottom[i]->mutable_gpu_half_diff(h));
      }
      continue;
    }
    const float* top_diff = top[i]->gpu_diff();
    if (fast_) {
      const bool bias_diff = bias_term_ && param_propagate_down(1);
      if (param_propagate_down(0) || bias_diff) {
        fast_->BackwardWeights(bottom[i]->gpu_data(), top_diff,
                               param_propagate_down(0) ? blobs_[0]->mutable_gpu_diff() : nullptr,
                               bias_diff ? blobs_[1]->mutable_gpu_diff() : nullptr);
      }
      if (propagate_down[i]) fast_->BackwardData(top_diff, weights, bottom[i]->mutable_gpu_diff());
      continue;
    }
    if (bias_term_ && param_propagate_down(1)) {
      BackwardBiasGpu(top_diff, blobs_[1]->mutable_gpu_diff());
    }
    if (!param_propagate_down(0) && !propagate_down[i]) continue;
    const float* bottom_data = bottom[i]->gpu_data();
    float* weight_diff = param_propagate_down(0) ? blobs_[0]->mutable_gpu_diff() : nullptr;
    float* bottom_diff = propagate_down[i] ? bottom[i]->mutable_gpu_diff() : nullptr;
    for (int n = 0; n < num_; ++n) {
      const float* out = top_diff + conv_output_offset(n);
      if (weight_diff) {
        WeightGemmGpu(ColumnsGpu(bottom_data + conv_input_offset(n)), out, weight_diff);
      }
      if (bottom_diff) BackwardGemmGpu(out, weights, bottom_diff + conv_input_offset(n));
    }
  }
}

}  // namespace cortado
