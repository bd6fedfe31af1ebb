// SPDX-License-Identifier: Apache-2.0
// Reshape (Caffe type "Reshape"): gives its bottom a new shape without copying.
// Params: reshape_param.shape (dim 0 copies the matching bottom dimension, one dim -1 is
// inferred from the element count), reshape_param.axis (default 0; negative counts from the
// end, -1 meaning after the last axis) and reshape_param.num_axes (default -1: through the
// last axis): the bottom axes [axis, axis + num_axes) are replaced by `shape`.
// Bottom: one. Top: one with the same count, sharing the bottom's data and diff. Not in-place.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class ReshapeLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Reshape"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
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

 private:
  std::vector<int> copy_axes_;  // indices into `shape` whose dim is 0
  int inferred_axis_ = -1;      // index into `shape` whose dim is -1, or -1
  int constant_count_ = 1;      // product of the explicit (positive) dims
};

}  // namespace cortado
