// SPDX-License-Identifier: Apache-2.0
#include "layers/convolution_layer.hpp"

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

void ConvolutionLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                  const std::vector<Tensor*>& top) {
  const float* weights = blobs_[0]->cpu_data();
  for (size_t i = 0; i < bottom.size(); ++i) {
    float* top_data = top[i]->mutable_cpu_data();
    ForwardGemm(bottom[i]->cpu_data(), weights, top_data, num_);
    if (bias_term_) ForwardBias(blobs_[1]->cpu_data(), top_data, num_);
  }
}

void ConvolutionLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                   const std::vector<bool>& propagate_down,
                                   const std::vector<Tensor*>& bottom) {
  const float* weights = blobs_[0]->cpu_data();
  for (size_t i = 0; i < top.size(); ++i) {
    const float* top_diff = top[i]->cpu_diff();
    if (bias_term_ && param_propagate_down(1)) {
      BackwardBias(top_diff, blobs_[1]->mutable_cpu_diff(), num_);
    }
    if (param_propagate_down(0)) {
      WeightGemm(bottom[i]->cpu_data(), top_diff, blobs_[0]->mutable_cpu_diff(), num_);
    }
    if (propagate_down[i]) {
      BackwardGemm(top_diff, weights, bottom[i]->mutable_cpu_diff(), num_);
    }
  }
}

CORTADO_REGISTER_LAYER(Convolution, ConvolutionLayer);

}  // namespace cortado
