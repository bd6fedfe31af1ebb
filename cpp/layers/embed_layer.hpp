// SPDX-License-Identifier: Apache-2.0
// Embed (Caffe type "Embed"): a lookup table, as used for word embeddings. Each bottom value is
// an index i into a table of input_dim rows; its output is row i of the weights (plus the bias):
//   top[..., d] = W[i, d] + b[d]
// It computes what an InnerProduct on the one-hot encoding of i would, without building it.
//
// Params (embed_param): num_output N (required, > 0), input_dim K (the vocabulary size,
// required, > 0), bias_term (default true), weight_filler and bias_filler (both default
// constant 0, as in Caffe).
// Bottom: one tensor of any shape holding integer indices stored as floats; every value must be
// an integer in [0, K). Top: one tensor of shape bottom.shape + [N].
// Blobs (Caffe's layout and order, so .caffemodel files interoperate):
//   blobs[0] weights, shape [K, N] (transposed from InnerProduct's, one row per index);
//   blobs[1] bias, shape [N] (only with bias_term).
// Backward: dW[i, :] += dy[n, :] for every position n holding index i (summed over repeated
// indices; the GPU adds with atomicAdd), db += sum over positions of dy. The indices have no
// gradient: propagate_down to the bottom is an error, as in Caffe.
// Differences from Caffe: an index that is not an integer in [0, K) throws kInvalidArgument
// naming the layer, the value and its position, in Forward on the CPU and the GPU (Caffe checks
// only in debug builds and otherwise reads out of bounds).
#pragma once

#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class EmbedLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Embed"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  // The bottom holds indices: never a gradient to it.
  bool AllowForceBackward(int /*bottom_index*/) const override { return false; }
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  // Throws kInvalidArgument when asked for the indices' gradient.
  void RefuseBottomGradient(const std::vector<bool>& propagate_down) const;
  // Throws kInvalidArgument for the bottom value at `position` (not an integer in [0, K)).
  [[noreturn]] void ThrowBadIndex(float value, int position) const;

  int m_ = 0;  // positions: bottom count
  int k_ = 0;  // input_dim
  int n_ = 0;  // num_output
  bool bias_term_ = true;
};

}  // namespace cortado
