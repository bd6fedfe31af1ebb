// SPDX-License-Identifier: Apache-2.0
// Parameter (Caffe type "Parameter"): outputs a learnable blob, so that a parameter can feed
// other layers as an ordinary top (e.g. a learned bias added with Eltwise).
//
// Params (parameter_param): shape (a BlobShape; absent means a 0-axis scalar, as in Caffe).
// Bottoms: none. Top: one tensor of parameter_param.shape.
// Blobs (Caffe's layout): blobs[0] of parameter_param.shape, zero-initialised (Caffe has no
// filler here); a blob loaded from a .caffemodel must have that shape.
// Forward: top data = blobs[0] data. Backward: blobs[0] diff += top diff.
// Difference from Caffe: Caffe makes the top share the blob's data and diff buffers, so the
// consumers' gradient lands in the blob diff directly (and replaces, rather than adds to, what
// an earlier pass of the same iteration left there, e.g. with iter_size > 1). Here Forward
// copies and Backward adds, as every other parameter gradient accumulates.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ParameterLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Parameter"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int ExactNumTopBlobs() const override { return 1; }
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  std::vector<int> shape_;  // parameter_param.shape
};

}  // namespace cortado
