// SPDX-License-Identifier: Apache-2.0
// Filter on the GPU: the same results as filter_layer.cpp. The selector is read on the host (as
// Caffe reads it); the selected rows and each bottom row's top row go to the device once per
// Forward, and each pass is one kernel per top, one element per thread.
#include <algorithm>

#include "core/cuda.hpp"
#include "layers/filter_layer.hpp"

namespace cortado {
namespace {

// out[k, d] = in[selected[k], d].
__global__ void FilterForward(int64_t count, int dim, const float* in, const int* selected,
                              float* out) {
  CORTADO_KERNEL_LOOP(i, count) {
    out[i] = in[static_cast<int64_t>(selected[i / dim]) * dim + i % dim];
  }
}

// dx[n, d] = dtop[top_row[n], d], or 0 where row n was filtered out (top_row -1).
__global__ void FilterBackward(int64_t count, int dim, const float* dtop, const int* top_row,
                               float* dx) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int k = top_row[i / dim];
    dx[i] = k < 0 ? 0.0f : dtop[static_cast<int64_t>(k) * dim + i % dim];
  }
}

}  // namespace

void FilterLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  Select(bottom);
  ShapeTops(bottom, top, -1);
  const int num = bottom.back()->shape(0);
  const int kept = static_cast<int>(selected_.size());
  const size_t ints = std::max<size_t>(1, static_cast<size_t>(kept) + num);
  if (rows_ == nullptr || rows_->size() < sizeof(int) * ints) {
    rows_ = std::make_shared<SyncedMemory>(sizeof(int) * ints);
  }
  int* host = static_cast<int*>(rows_->mutable_host_data());
  int* top_row = host + kept;
  std::copy(selected_.begin(), selected_.end(), host);
  std::fill(top_row, top_row + num, -1);
  for (int k = 0; k < kept; ++k) top_row[selected_[k]] = k;
  if (kept == 0) return;
  const int* selected = static_cast<const int*>(rows_->device_data());
  for (size_t t = 0; t < top.size(); ++t) {
    const int64_t count = top[t]->count();
    if (count == 0) continue;
    FilterForward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
        count, bottom[t]->count(1), bottom[t]->gpu_data(), selected, top[t]->mutable_gpu_data());
    CORTADO_CUDA_CHECK_LAUNCH();
  }
}

void FilterLayer::BackwardGpu(const std::vector<Tensor*>& top,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& bottom) {
  CheckSelectorBackward(propagate_down);
  if (rows_ == nullptr) {
    CORTADO_THROW(kInvalidArgument, "{}: Backward before any Forward", Describe());
  }
  const int kept = static_cast<int>(selected_.size());
  for (size_t t = 0; t < top.size(); ++t) {
    if (!propagate_down[t]) continue;
    const int64_t count = bottom[t]->count();
    if (count == 0) continue;
    // Written by the last Forward.
    const int* top_row = static_cast<const int*>(rows_->device_data()) + kept;
    FilterBackward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
        count, bottom[t]->count(1), kept == 0 ? nullptr : top[t]->gpu_diff(), top_row,
        bottom[t]->mutable_gpu_diff());
    CORTADO_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cortado
