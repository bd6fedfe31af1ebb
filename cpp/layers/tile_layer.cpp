// SPDX-License-Identifier: Apache-2.0
#include "layers/tile_layer.hpp"

#include <climits>
#include <cstdint>

#include "math/math.hpp"

namespace cortado {

void TileLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const auto& p = param_.tile_param();
  const Tensor& in = *bottom[0];
  if (bottom[0] == top[0]) {
    CORTADO_THROW(kInvalidArgument, "{}: cannot run in place (the top is larger than the bottom)",
                  Describe());
  }
  if (p.axis() < -in.num_axes() || p.axis() >= in.num_axes()) {
    CORTADO_THROW(kInvalidArgument, "{}: tile_param.axis {} is out of range for bottom shape {}",
                  Describe(), p.axis(), in.ShapeString());
  }
  if (!p.has_tiles()) {
    CORTADO_THROW(kInvalidArgument, "{}: tile_param.tiles is required", Describe());
  }
  if (p.tiles() <= 0) {
    CORTADO_THROW(kInvalidArgument, "{}: tile_param.tiles must be positive, got {}", Describe(),
                  p.tiles());
  }
  const int axis = in.CanonicalAxisIndex(p.axis());
  tiles_ = p.tiles();
  if (static_cast<int64_t>(in.count()) * tiles_ > INT_MAX) {
    CORTADO_THROW(kInvalidArgument, "{}: {} tiles of bottom shape {} exceed INT_MAX elements",
                  Describe(), tiles_, in.ShapeString());
  }
  std::vector<int> top_shape = in.shape();
  top_shape[axis] *= tiles_;
  top[0]->Reshape(top_shape);
  outer_dim_ = in.count(0, axis);
  inner_dim_ = in.count(axis);
}

void TileLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  for (int i = 0; i < outer_dim_; ++i) {
    const float* row = x + static_cast<size_t>(i) * inner_dim_;
    for (int t = 0; t < tiles_; ++t) {
      math::Copy(inner_dim_, row, y + (static_cast<size_t>(i) * tiles_ + t) * inner_dim_);
    }
  }
}

void TileLayer::BackwardCpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  for (int i = 0; i < outer_dim_; ++i) {
    float* row = dx + static_cast<size_t>(i) * inner_dim_;
    const float* tiles = dy + static_cast<size_t>(i) * tiles_ * inner_dim_;
    math::Copy(inner_dim_, tiles, row);
    for (int t = 1; t < tiles_; ++t) {
      math::Axpy(inner_dim_, 1.0f, tiles + static_cast<size_t>(t) * inner_dim_, row);
    }
  }
}

CORTADO_REGISTER_LAYER(Tile, TileLayer);

}  // namespace cortado
