// SPDX-License-Identifier: Apache-2.0
// Deconvolution on the GPU: Convolution's passes transposed (base_conv_layer.cu). The conv
// "input" is the top here and the conv "output" the bottom.
#include "layers/deconvolution_layer.hpp"

namespace cortado {

void DeconvolutionLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                    const std::vector<Tensor*>& top) {
  const float* weights = blobs_[0]->gpu_data();
  for (size_t i = 0; i < bottom.size(); ++i) {
    const float* bottom_data = bottom[i]->gpu_data();
    float* top_data = top[i]->mutable_gpu_data();
    for (int n = 0; n < num_; ++n) {
      BackwardGemmGpu(bottom_data + conv_output_offset(n), weights,
                      top_data + conv_input_offset(n));
    }
    if (bias_term_) ForwardBiasGpu(blobs_[1]->gpu_data(), top_data);
  }
}

void DeconvolutionLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                     const std::vector<bool>& propagate_down,
                                     const std::vector<Tensor*>& bottom) {
  const float* weights = blobs_[0]->gpu_data();
  for (size_t i = 0; i < top.size(); ++i) {
    const float* top_diff = top[i]->gpu_diff();
    if (bias_term_ && param_propagate_down(1)) {
      BackwardBiasGpu(top_diff, blobs_[1]->mutable_gpu_diff());
    }
    if (!param_propagate_down(0) && !propagate_down[i]) continue;
    const float* bottom_data = bottom[i]->gpu_data();
    float* weight_diff = param_propagate_down(0) ? blobs_[0]->mutable_gpu_diff() : nullptr;
    float* bottom_diff = propagate_down[i] ? bottom[i]->mutable_gpu_diff() : nullptr;
    for (int n = 0; n < num_; ++n) {
      // One im2col of the top diff serves both products.
      const float* columns = ColumnsGpu(top_diff + conv_input_offset(n));
      if (weight_diff) WeightGemmGpu(columns, bottom_data + conv_output_offset(n), weight_diff);
      if (bottom_diff) ForwardGemmGpu(columns, weights, bottom_diff + conv_output_offset(n));
    }
  }
}

}  // namespace cortado
