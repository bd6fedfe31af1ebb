// SPDX-License-Identifier: Apache-2.0
// BatchReindex on the GPU: the same results as batch_reindex_layer.cpp. The indices are checked
// on the host; Forward gathers one element per thread. Backward groups the top rows by the data
// row they picked (on the host, as Caffe does), so that each thread sums one data element's
// picks in ascending top-row order, without atomics: the result repeats bit for bit.
#include <algorithm>
#include <cstring>

#include "core/cuda.hpp"
#include "layers/batch_reindex_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

__global__ void ReindexForward(int64_t count, int inner, const float* in, const float* index,
                               float* out) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int64_t m = i / inner;
    const int64_t n = static_cast<int>(index[m]);
    out[i] = in[n * inner + i % inner];
  }
}

// dx[n, d] = sum over the top rows m grouped under n of dtop[m, d].
__global__ void ReindexBackward(int64_t count, int inner, const float* dtop, const int* offsets,
                                const int* rows, float* dx) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int64_t n = i / inner;
    const int64_t d = i % inner;
    float sum = 0.0f;
    for (int k = offsets[n]; k < offsets[n + 1]; ++k)
      sum += dtop[rows[k] * static_cast<int64_t>(inner) + d];
    dx[i] = sum;
  }
}

}  // namespace

void BatchReindexLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                   const std::vector<Tensor*>& top) {
  CheckIndices(bottom);
  const int64_t count = top[0]->count();
  if (count == 0) return;
  ReindexForward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      count, bottom[0]->count(1), bottom[0]->gpu_data(), bottom[1]->gpu_data(),
      top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void BatchReindexLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                    const std::vector<bool>& propagate_down,
                                    const std::vector<Tensor*>& bottom) {
  CheckIndexBackward(propagate_down);
  if (!propagate_down[0]) return;
  const int64_t count = bottom[0]->count();
  if (count == 0) return;
  const int num = bottom[0]->shape(0);
  const int picks = bottom[1]->count();
  // Counting sort of the top rows by picked data row (stable: ascending within a group).
  const size_t ints = static_cast<size_t>(num) + 1 + static_cast<size_t>(picks);
  if (groups_ == nullptr || groups_->size() < sizeof(int) * ints) {
    groups_ = std::make_shared<SyncedMemory>(sizeof(int) * ints);
  }
  int* offsets = static_cast<int*>(groups_->mutable_host_data());
  int* rows = offsets + num + 1;
  std::fill(offsets, offsets + num + 1, 0);
  const float* index = bottom[1]->cpu_data();  // checked by Forward
  for (int m = 0; m < picks; ++m) ++offsets[static_cast<int>(index[m]) + 1];
  for (int n = 0; n < num; ++n) offsets[n + 1] += offsets[n];
  std::vector<int> next(offsets, offsets + num);
  for (int m = 0; m < picks; ++m) rows[next[static_cast<int>(index[m])]++] = m;
  const int* device = static_cast<const int*>(groups_->device_data());
  ReindexBackward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      count, bottom[0]->count(1), top[0]->gpu_diff(), device, device + num + 1,
      bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
