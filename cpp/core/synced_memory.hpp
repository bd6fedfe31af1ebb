// SPDX-License-Identifier: Apache-2.0
// A buffer that lives on the host, on a CUDA device, or both, copied lazily on access
// (Caffe's SyncedMemory). Host memory is 64-byte aligned and zero-filled on first use.
// Not thread-safe; owned by one Tensor (or shared between tensors through shared_ptr).
#pragma once

#include <cstddef>

namespace cortado {

class SyncedMemory {
 public:
  enum class Head { kUninitialized, kHost, kDevice, kSynced };

  explicit SyncedMemory(size_t bytes = 0, int device_id = 0);
  ~SyncedMemory();
  SyncedMemory(const SyncedMemory&) = delete;
  SyncedMemory& operator=(const SyncedMemory&) = delete;

  const void* host_data();
  void* mutable_host_data();
  // Device pointers; throw kUnimplemented in a build without CUDA.
  const void* device_data();
  void* mutable_device_data();

  size_t size() const { return bytes_; }
  Head head() const { return head_; }

 private:
  void ToHost();
  void ToDevice();

  size_t bytes_;
  int device_id_;
  void* host_ = nullptr;
  void* device_ = nullptr;
  Head head_ = Head::kUninitialized;
};

// Host memory held by all SyncedMemory buffers of the process now, and the most at any time
// since the start (or the last reset): the host twin of cuda::AllocatedBytes.
size_t HostAllocatedBytes();
size_t HostPeakAllocatedBytes();
void ResetHostPeakAllocatedBytes();

}  // namespace cortado
