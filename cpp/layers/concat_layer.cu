// SPDX-License-Identifier: Apache-2.0
// Concat on the GPU: one copy kernel per bottom, moving its rows to (forward) or from (backward)
// their place in the top, as concat_layer.cpp does with one memcpy per row.
#include "core/cuda.hpp"
#include "layers/concat_layer.hpp"

namespace cortado {
namespace {

// `rows` rows of `row` floats: row r of the bottom is row r of the top's stride top_row,
// starting at `offset` within it. forward: top <- bottom, else bottom <- top.
__global__ void ConcatCopy(int64_t n, int row, int top_row, int offset, bool forward,
                           const float* src, float* dst) {
  CORTADO_KERNEL_LOOP(i, n) {
    const int64_t r = i / row;
    const int64_t top_index = r * top_row + offset + (i - r * row);
    if (forward) {
      dst[top_index] = src[i];
    } else {
      dst[i] = src[top_index];
    }
  }
}

}  // namespace

void ConcatLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (bottom.size() == 1) return;  // the top shares the bottom's data
  float* top_data = top[0]->mutable_gpu_data();
  const int top_row = top[0]->shape(concat_axis_) * concat_input_size_;
  int offset = 0;
  for (Tensor* b : bottom) {
    const int row = b->shape(concat_axis_) * concat_input_size_;
    const int64_t n = static_cast<int64_t>(num_concats_) * row;
    if (n > 0) {
      ConcatCopy<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
          n, row, top_row, offset, true, b->gpu_data(), top_data);
      CORTADO_CUDA_CHECK_LAUNCH();
    }
    offset += row;
  }
}

void ConcatLayer::BackwardGpu(const std::vector<Tensor*>& top,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& bottom) {
  if (bottom.size() == 1) return;  // the bottom shares the top's diff
  const float* top_diff = top[0]->gpu_diff();
  const int top_row = top[0]->shape(concat_axis_) * concat_input_size_;
  int offset = 0;
  for (size_t i = 0; i < bottom.size(); ++i) {
    Tensor* b = bottom[i];
    const int row = b->shape(concat_axis_) * concat_input_size_;
    const int64_t n = static_cast<int64_t>(num_concats_) * row;
    if (propagate_down[i] && n > 0) {
      ConcatCopy<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
          n, row, top_row, offset, false, top_diff, b->mutable_gpu_diff());
      CORTADO_CUDA_CHECK_LAUNCH();
    }
    offset += row;
  }
}

}  // namespace cortado
