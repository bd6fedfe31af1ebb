// SPDX-License-Identifier: Apache-2.0
// Silence (Caffe type "Silence"): consumes its bottoms so the net does not report them as
// unused outputs. At least one bottom, no tops, no params.
// Forward does nothing; Backward writes zero diffs to the bottoms asked for.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class SilenceLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Silence"; }
  int MinBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 0; }
  void Reshape(const std::vector<Tensor*>&, const std::vector<Tensor*>&) override {}

 protected:
  void ForwardCpu(const std::vector<Tensor*>&, const std::vector<Tensor*>&) override {}
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;
};

}  // namespace cortado
