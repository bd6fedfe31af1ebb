// SPDX-License-Identifier: Apache-2.0
// The small net the weight and solver-state targets load into: one of each kind of learnable
// layer a Caffe model commonly holds (convolution, batch norm, scale, PReLU, inner product).
#pragma once

namespace cortado::fuzz {

inline constexpr const char* kFixedNet = R"(
name: "fixed"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 1 dim: 6 dim: 6 } shape { dim: 2 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 3 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "prelu" type: "PReLU" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
        inner_product_param { num_output: 4 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
)";

}  // namespace cortado::fuzz
