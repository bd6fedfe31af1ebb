// SPDX-License-Identifier: Apache-2.0
// Slice on the GPU: one copy kernel per top, moving its rows out of (forward) or back into
// (backward) their place in the bottom, as slice_layer.cpp does with one memcpy per row.
#include "core/cuda.hpp"
#include "layers/slice_layer.hpp"

namespace cortado {
namespace {

// Row r of the top (`row` floats) is row r of the bottom (stride bottom_row) from `offset` on.
// forward: top <- bottom, else bottom <- top.
__global__ void SliceCopy(int64_t n, int row, int bottom_row, int offset, bool forward,
                          const float* src, float* dst) {
  CORTADO_KERNEL_LOOP(i, n) {
    const int64_t r = i / row;
    const int64_t bottom_index = r * bottom_row + offset + (i - r * row);
    if (forward) {
      dst[i] = src[bottom_index];
    } else {
      dst[bottom_index] = src[i];
    }
  }
}

}  // namespace

void SliceLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (top.size() == 1) return;  // the top shares the bottom's data
  const float* in = bottom[0]->gpu_data();
  const int bottom_row = bottom[0]->shape(slice_axis_) * slice_size_;
  int offset = 0;
  for (Tensor* t : top) {
    const int row = t->shape(slice_axis_) * slice_size_;
    const int64_t n = static_cast<int64_t>(num_slices_) * row;
    if (n > 0) {
      SliceCopy<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
          n, row, bottom_row, offset, true, in, t->mutable_gpu_data());
      CORTADO_CUDA_CHECK_LAUNCH();
    }
    offset += row;
  }
}

void SliceLayer::BackwardGpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0] || top.size() == 1) return;
  float* diff = bottom[0]->mutable_gpu_diff();
  const int bottom_row = bottom[0]->shape(slice_axis_) * slice_size_;
  int offset = 0;
  for (Tensor* t : top) {
    const int row = t->shape(slice_axis_) * slice_size_;
    const int64_t n = static_cast<int64_t>(num_slices_) * row;
    if (n > 0) {
      SliceCopy<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
          n, row, bottom_row, offset, false, t->gpu_diff(), diff);
      CORTADO_CUDA_CHECK_LAUNCH();
    }
    offset += row;
  }
}

}  // namespace cortado
