// SPDX-License-Identifier: Apache-2.0
// InnerProduct (Caffe type "InnerProduct"): a fully connected layer.
//
// Params (inner_product_param): num_output N (required, > 0), bias_term (default true), axis
// (default 1; negative counts from the end), transpose (default false), weight_filler,
// bias_filler (both default constant 0, as in Caffe).
// Bottom: one tensor; axes [0, axis) are kept and axes [axis, end) are flattened into a vector
// of K = count(axis) values, so the bottom is read as an M x K matrix, M = count(0, axis).
// Top: one tensor of shape bottom.shape[0:axis] + [N], computed as top = bottom * W^T + b.
// Blobs (Caffe's layout and order, so .caffemodel files interoperate):
//   blobs[0] weights, shape [N, K] (or [K, N] with transpose: top = bottom * W);
//   blobs[1] bias, shape [N] (only with bias_term).
// Forward and each part of Backward are one GEMM over the whole batch (on the CPU and the GPU).
// Mixed precision on the GPU (Layer::HalfTensors, with cuBLAS): the bottom, top and their
// gradients are read and written in the 16-bit type; the weights are rounded into it for each
// pass, the sums stay float32 and the weight and bias gradients are accumulated in float32.
// Errors: num_output 0 (Caffe builds an empty layer), a bottom whose K does not match the
// weights (named with both shapes), and running in place.
#pragma once

#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class InnerProductLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "InnerProduct"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool TakesHalfTensors() const override;

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int m_ = 0;  // rows: count(0, axis)
  int k_ = 0;  // inputs per row: count(axis)
  int n_ = 0;  // num_output
  bool bias_term_ = true;
  bool transpose_ = false;
  // The weights in the 16-bit type (in the context's half scratch), for one pass.
  const void* HalfWeights(HalfType type);

  std::vector<float> ones_;  // M ones, to sum the top diff over rows for the bias gradient
  Tensor ones_gpu_;          // the same on the device (GPU passes), filled when M changes
};

}  // namespace cortado
