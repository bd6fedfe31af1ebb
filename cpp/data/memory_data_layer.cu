// SPDX-License-Identifier: Apache-2.0
// MemoryData on the GPU: the batch is copied from the caller's (pageable) arrays straight into
// the tops' device memory. A plain cudaMemcpy is used: from pageable memory the driver stages
// the copy through its own pinned buffer and synchronises anyway, and the blocking call is what
// guarantees that the caller may change or free its arrays (after a Reset) once Forward returns.
// The context's stream is a blocking stream, so the copy is ordered after the work already
// queued there and before the work queued after it.
#include "core/cuda.hpp"
#include "data/memory_data_layer.hpp"

namespace cortado {

void MemoryDataLayer::ForwardGpu(const std::vector<Tensor*>& /*bottom*/,
                                 const std::vector<Tensor*>& top) {
  const int first = BeginBatch(top);
  const size_t sample = static_cast<size_t>(channels_) * height_ * width_;
  CORTADO_CUDA_CHECK(cudaMemcpy(top[0]->mutable_gpu_data(), data_ + sample * first,
                                sample * batch_size_ * sizeof(float), cudaMemcpyHostToDevice));
  CORTADO_CUDA_CHECK(cudaMemcpy(top[1]->mutable_gpu_data(), labels_ + first,
                                static_cast<size_t>(batch_size_) * sizeof(float),
                                cudaMemcpyHostToDevice));
}

void MemoryDataLayer::BackwardGpu(const std::vector<Tensor*>& /*top*/,
                                  const std::vector<bool>& /*propagate_down*/,
                                  const std::vector<Tensor*>& /*bottom*/) {}

}  // namespace cortado
