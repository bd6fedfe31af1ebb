// SPDX-License-Identifier: Apache-2.0
// Split (Caffe type "Split"): hands one bottom to several consumers. Every top shares the
// bottom's data; Backward sums the tops' diffs into the bottom's diff. No params.
// Bottom: one. Tops: one or more, each shaped like the bottom. Not in-place.
// The net inserts these where a blob feeds several layers (net/insert_splits).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class SplitLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Split"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int MinTopBlobs() const override { return 1; }
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  bool BackwardReadsBottomData(int /*index*/) const override { return false; }
  bool BackwardReadsTopData(int /*index*/) const override { return false; }
  bool TakesHalfTensors() const override { return true; }
  NhwcUse NhwcTensors() const override { return NhwcUse::kSame; }  // element by element
  NhwcUse BlockedTensors() const override { return NhwcUse::kSame; }

 protected:
  void ForwardCpu(const std::vector<Tensor*>&, const std::vector<Tensor*>&) override {}
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;
};

}  // namespace cortado
