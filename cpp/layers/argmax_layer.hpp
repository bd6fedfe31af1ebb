// SPDX-License-Identifier: Apache-2.0
// ArgMax (Caffe type "ArgMax"): the indices (and optionally values) of the top_k largest
// entries. Ties go to the larger index (Caffe sorts (value, index) pairs in descending order).
// Params: argmax_param.out_max_val (default false), top_k (default 1), axis (optional).
// One bottom, one top:
//   - axis set: the top is the bottom's shape with shape(axis) = top_k, holding the indices
//     along that axis, or the values instead of the indices when out_max_val;
//   - axis unset: each sample (axis 0) is flattened; the top is N x 1 x top_k (indices), or
//     N x 2 x top_k with out_max_val (indices, then values), padded with 1s to the bottom's
//     number of axes when it has more than 3.
// No backward: asking for a gradient throws kUnimplemented (Caffe: NOT_IMPLEMENTED).
#pragma once

#include <utility>
#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class ArgMaxLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "ArgMax"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  bool out_max_val_ = false;
  int top_k_ = 1;
  bool has_axis_ = false;
  int axis_ = 0;
  std::vector<std::pair<float, int>> candidates_;
};

}  // namespace cortado
