// SPDX-License-Identifier: Apache-2.0
// Flatten (Caffe type "Flatten"): merges the axes [axis, end_axis] of its bottom into one.
// Params: flatten_param.axis (default 1), flatten_param.end_axis (default -1, the last axis);
// negative values count from the end. E.g. N x C x H x W -> N x (C*H*W) with the defaults.
// Bottom: one. Top: one, sharing the bottom's data and diff (no copy). Not in-place.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class FlattenLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Flatten"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  // Data and diff are shared, so there is nothing to compute.
  void ForwardCpu(const std::vector<Tensor*>&, const std::vector<Tensor*>&) override {}
  void BackwardCpu(const std::vector<Tensor*>&, const std::vector<bool>&,
                   const std::vector<Tensor*>&) override {}
  // The same on the GPU: overridden so the base class's host fallback (which would warn and
  // copy) is never taken.
  void ForwardGpu(const std::vector<Tensor*>&, const std::vector<Tensor*>&) override {}
  void BackwardGpu(const std::vector<Tensor*>&, const std::vector<bool>&,
                   const std::vector<Tensor*>&) override {}
};

}  // namespace cortado
