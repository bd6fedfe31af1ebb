// SPDX-License-Identifier: Apache-2.0
// Tile (Caffe type "Tile"): repeats the bottom `tiles` times along `axis`. With the bottom seen
// as [outer, inner] (outer = product of the axes before `axis`, inner = the rest, axis
// included), each outer row of the top holds `tiles` copies of the bottom's row.
//
// Params (tile_param): axis (default 1; negative counts from the end), tiles (required, > 0).
// Bottom: one tensor with axis in range. Top: the bottom's shape with shape(axis) * tiles; not
// the bottom itself.
// Backward: dx = the sum of dy over the tiles (added in tile order, as Caffe).
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class TileLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Tile"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool BackwardReadsBottomData(int /*index*/) const override { return false; }
  bool BackwardReadsTopData(int /*index*/) const override { return false; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int tiles_ = 1;
  int outer_dim_ = 0;
  int inner_dim_ = 0;
};

}  // namespace cortado
