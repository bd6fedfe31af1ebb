// SPDX-License-Identifier: Apache-2.0
// BasePrefetchingDataLayer on the GPU: the prefetch thread still produces batches on the host;
// Forward copies the batch into pinned staging memory (so the batch goes straight back to the
// producer) and queues the host-to-device copies on the context's stream, recording an event.
// The next Forward waits for that event before it overwrites the staging memory, so the copy
// always reads live memory without the host waiting for the stream here.
#include <cstring>

#include "core/cuda.hpp"
#include "core/logging.hpp"
#include "data/base_data_layer.hpp"

namespace cortado {

void BasePrefetchingDataLayer::ForwardGpu(const std::vector<Tensor*>& /*bottom*/,
                                          const std::vector<Tensor*>& top) {
  cudaStream_t stream = cuda::Stream(*ctx_);
  std::unique_ptr<DataBatch> batch = TakeBatch(top);
  size_t total = 0;
  for (const auto& values : batch->tops) total += values.size();
  // The previous batch's copies read staging_: they must be done before it is overwritten.
  if (copy_done_ != nullptr) CORTADO_CUDA_CHECK(cudaEventSynchronize(copy_done_));
  if (total > staging_floats_) {
    if (staging_ != nullptr) CORTADO_CUDA_CHECK(cudaFreeHost(staging_));
    staging_ = nullptr;
    staging_floats_ = 0;
    CORTADO_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_), total * sizeof(float)));
    staging_floats_ = total;
  }
  if (copy_done_ == nullptr) {
    CORTADO_CUDA_CHECK(cudaEventCreateWithFlags(&copy_done_, cudaEventDisableTiming));
  }
  size_t offset = 0;
  for (const auto& values : batch->tops) {
    if (!values.empty())
      std::memcpy(staging_ + offset, values.data(), values.size() * sizeof(float));
    offset += values.size();
  }
  Recycle(std::move(batch));
  offset = 0;
  for (Tensor* t : top) {
    const size_t n = static_cast<size_t>(t->count());
    if (n > 0) {
      CORTADO_CUDA_CHECK(cudaMemcpyAsync(t->mutable_gpu_data(), staging_ + offset,
                                         n * sizeof(float), cudaMemcpyHostToDevice, stream));
    }
    offset += n;
  }
  CORTADO_CUDA_CHECK(cudaEventRecord(copy_done_, stream));
}

void BasePrefetchingDataLayer::BackwardGpu(const std::vector<Tensor*>& /*top*/,
                                           const std::vector<bool>& /*propagate_down*/,
                                           const std::vector<Tensor*>& /*bottom*/) {}

void BasePrefetchingDataLayer::ReleaseStaging() noexcept {
  if (copy_done_ != nullptr) {
    if (cudaEventSynchronize(copy_done_) != cudaSuccess ||
        cudaEventDestroy(copy_done_) != cudaSuccess) {
      CORTADO_LOG_ERROR("{}: waiting for the last batch copy failed", Describe());
    }
    copy_done_ = nullptr;
  }
  if (staging_ != nullptr && cudaFreeHost(staging_) != cudaSuccess) {
    CORTADO_LOG_ERROR("{}: cudaFreeHost failed for the batch staging memory", Describe());
  }
  staging_ = nullptr;
  staging_floats_ = 0;
}

}  // namespace cortado
