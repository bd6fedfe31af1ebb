// SPDX-License-Identifier: Apache-2.0
// Tile on the GPU: one thread per top element in Forward, one per bottom element in Backward
// (which adds the tiles in order, as the CPU pass does, so the two agree bit for bit).
#include "core/cuda.hpp"
#include "layers/tile_layer.hpp"

namespace cortado {
namespace {

// Top element i is (row r, tile t, position j) with i = (r * tiles + t) * inner + j.
__global__ void TileForward(int64_t n, const float* x, int inner, int tiles, float* y) {
  CORTADO_KERNEL_LOOP(i, n) {
    const int64_t j = i % inner;
    const int64_t r = i / (static_cast<int64_t>(inner) * tiles);
    y[i] = x[r * inner + j];
  }
}

__global__ void TileBackward(int64_t n, const float* dy, int inner, int tiles, float* dx) {
  CORTADO_KERNEL_LOOP(i, n) {
    const int64_t j = i % inner;
    const int64_t r = i / inner;
    const float* src = dy + r * tiles * inner + j;
    float sum = src[0];
    for (int t = 1; t < tiles; ++t) sum += src[static_cast<int64_t>(t) * inner];
    dx[i] = sum;
  }
}

}  // namespace

void TileLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int64_t n = top[0]->count();
  if (n == 0) return;
  TileForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, bottom[0]->gpu_data(), inner_dim_, tiles_, top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void TileLayer::BackwardGpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int64_t n = bottom[0]->count();
  if (n == 0) return;
  TileBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, top[0]->gpu_diff(), inner_dim_, tiles_, bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
