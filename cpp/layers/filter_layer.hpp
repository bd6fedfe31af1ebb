// SPDX-License-Identifier: Apache-2.0
// Filter (Caffe type "Filter"): keeps the rows (items along the first axis) whose selector value
// is nonzero, in order, from every bottom but the last.
//
// Bottoms: 0 .. K-1 = the tensors to filter, each N x ...; K = the selector, N values (shape N,
//          N x 1, N x 1 x 1 x 1: every axis after the first 1). No params.
// Tops: K, top t = the selected rows of bottom t (shape S x ..., S the number of nonzero
//       selector values; S may be 0, which gives an empty top).
// Shapes as Caffe: the first Reshape (in Initialize, before any selector values exist) gives
// every top N rows; later Reshapes, and every Forward (Caffe's Forward reshapes first), count
// the selector on the host. A net must reshape the layers after this one when S changes.
// Backward: dbottom_t = dtop_t at the selected rows, 0 at the others; the selector gets no
// gradient (asking for it is an error).
// Differences from Caffe: with S = 0 Backward zeroes the bottom diffs (Caffe divides by zero);
// force_backward never reaches the selector (Caffe would abort).
#pragma once

#include <memory>
#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class FilterLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Filter"; }
  int MinBottomBlobs() const override { return 2; }
  int MinTopBlobs() const override { return 1; }
  // The filtered bottoms only, not the selector.
  bool AllowForceBackward(int bottom_index) const override {
    return bottom_index + 1 < num_bottoms_;
  }
  bool BackwardReadsBottomData(int /*bottom_index*/) const override { return false; }
  bool BackwardReadsTopData(int /*top_index*/) const override { return false; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  // Reads the selector (the last bottom) into selected_.
  void Select(const std::vector<Tensor*>& bottom);
  // Gives every top selected_.size() rows (or `rows` when >= 0).
  void ShapeTops(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top,
                 int rows) const;
  void CheckSelectorBackward(const std::vector<bool>& propagate_down) const;

  int num_bottoms_ = 0;  // set by Setup
  bool first_reshape_ = true;
  std::vector<int> selected_;  // the rows kept, ascending
  // GPU: ints [selected rows (S) | top row of each bottom row, or -1 (N)].
  std::shared_ptr<SyncedMemory> rows_;
};

}  // namespace cortado
