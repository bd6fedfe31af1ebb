// SPDX-License-Identifier: Apache-2.0
// Input (Caffe type "Input"): tops whose contents the caller fills before Forward.
// Params: input_param.shape, one BlobShape for all tops or one per top. No bottoms.
// Forward and Backward do nothing.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class InputLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Input"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int MinTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  // Tops keep whatever shape the caller gave them.
  void Reshape(const std::vector<Tensor*>&, const std::vector<Tensor*>&) override {}

 protected:
  void ForwardCpu(const std::vector<Tensor*>&, const std::vector<Tensor*>&) override {}
  void BackwardCpu(const std::vector<Tensor*>&, const std::vector<bool>&,
                   const std::vector<Tensor*>&) override {}
  // Nothing to compute on the GPU either: the caller fills the tops.
  void ForwardGpu(const std::vector<Tensor*>&, const std::vector<Tensor*>&) override {}
  void BackwardGpu(const std::vector<Tensor*>&, const std::vector<bool>&,
                   const std::vector<Tensor*>&) override {}
};

}  // namespace cortado
