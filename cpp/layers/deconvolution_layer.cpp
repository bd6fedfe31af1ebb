// SPDX-License-Identifier: Apache-2.0
#include "layers/deconvolution_layer.hpp"

namespace cortado {

void DeconvolutionLayer::ComputeOutputShape() {
  output_shape_.resize(num_spatial_axes_);
  for (int i = 0; i < num_spatial_axes_; ++i) {
    const int extent = dilation_[i] * (kernel_shape_[i] - 1) + 1;
    const int size = stride_[i] * (input_shape_[i] - 1) + extent - 2 * pad_[i];
    if (size <= 0) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: input size {} on axis {} (bottom spatial shape {}) with kernel extent {}, "
                    "stride {}, pad {} gives output size {}",
                    Describe(), input_shape_[i], channel_axis_ + 1 + i,
                    fmt::join(std::vector<int>(input_shape_), " "), extent, stride_[i], pad_[i],
                    size);
    }
    output_shape_[i] = size;
  }
}

// The conv "input" is the top here and the conv "output" the bottom.
void DeconvolutionLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                    const std::vector<Tensor*>& top) {
  const float* weights = blobs_[0]->cpu_data();
  for (size_t i = 0; i < bottom.size(); ++i) {
    float* top_data = top[i]->mutable_cpu_data();
    BackwardGemm(bottom[i]->cpu_data(), weights, top_data, num_);
    if (bias_term_) ForwardBias(blobs_[1]->cpu_data(), top_data, num_);
  }
}

void DeconvolutionLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                     const std::vector<bool>& propagate_down,
                                     const std::vector<Tensor*>& bottom) {
  const float* weights = blobs_[0]->cpu_data();
  for (size_t i = 0; i < top.size(); ++i) {
    const float* top_diff = top[i]->cpu_diff();
    if (bias_term_ && param_propagate_down(1)) {
      BackwardBias(top_diff, blobs_[1]->mutable_cpu_diff(), num_);
    }
    if (param_propagate_down(0)) {
      WeightGemm(top_diff, bottom[i]->cpu_data(), blobs_[0]->mutable_cpu_diff(), num_);
    }
    if (propagate_down[i]) {
      ForwardGemm(top_diff, weights, bottom[i]->mutable_cpu_diff(), num_);
    }
  }
}

CORTADO_REGISTER_LAYER(Deconvolution, DeconvolutionLayer);

}  // namespace cortado
