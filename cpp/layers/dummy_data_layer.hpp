// SPDX-License-Identifier: Apache-2.0
// DummyData (Caffe type "DummyData"): tops filled by fillers, for tests and benchmarks.
// No bottoms; at least one top.
// Params (dummy_data_param):
//   shape: one BlobShape for every top or one per top; or the legacy num/channels/height/width,
//          each given once or once per top (not both forms);
//   data_filler: none (constant 0), one for every top, or one per top.
// Tops filled by a "constant" filler are filled once in Setup; the others are refilled at
// every Forward (Caffe's refill rule). Tops keep their shapes; Backward does nothing.
#pragma once

#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class DummyDataLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "DummyData"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int MinTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>&, const std::vector<Tensor*>&) override {}

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>&, const std::vector<bool>&,
                   const std::vector<Tensor*>&) override {}
  CORTADO_GPU_PASSES;

 private:
  // One filler for every top, or one per top; refill_[i] says whether fillers_[i] runs at
  // every Forward (false for constant fillers, which Setup runs once).
  std::vector<caffe::FillerParameter> fillers_;
  std::vector<bool> refill_;
};

}  // namespace cortado
