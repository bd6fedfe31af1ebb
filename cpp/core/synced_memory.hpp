// SPDX-License-Identifier: Apache-2.0
// A buffer that lives on the host, on a CUDA device, or both, copied lazily on access
// (Caffe's SyncedMemory). Host memory is 64-byte aligned and zero-filled on first use.
// Not thread-safe; owned by one Tensor (or shared between tensors through shared_ptr).
//
// A view is a SyncedMemory over part of another one (its parent): it allocates nothing, its
// pointers are the parent's plus an offset, and its state is the parent's, so a write through
// any view marks the whole parent as written on that side and a read on the other side copies
// the whole parent. Net uses views to keep its parameters' gradients in one buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cortado {

class SyncedMemory {
 public:
  enum class Head { kUninitialized, kHost, kDevice, kSynced };

  explicit SyncedMemory(size_t bytes = 0, int device_id = 0);
  // A view of bytes [offset, offset + bytes) of `parent` (which it keeps alive); throws
  // kInternal if that range is not inside the parent.
  SyncedMemory(std::shared_ptr<SyncedMemory> parent, size_t offset, size_t bytes);
  ~SyncedMemory();
  SyncedMemory(const SyncedMemory&) = delete;
  SyncedMemory& operator=(const SyncedMemory&) = delete;

  const void* host_data();
  void* mutable_host_data();
  // Device pointers; throw kUnimplemented in a build without CUDA.
  const void* device_data();
  void* mutable_device_data();

  size_t size() const { return bytes_; }
  // Counts the mutable accesses (either side, through any view of it): a copy converted from
  // this buffer is current while the version it was made at is (Tensor's twins).
  uint64_t version() const { return parent_ ? parent_->version() : version_; }
  Head head() const { return parent_ ? parent_->head() : head_; }
  // The memory this one is a view of (nullptr if it holds its own), and where in it it starts.
  const std::shared_ptr<SyncedMemory>& parent() const { return parent_; }
  size_t offset() const { return offset_; }

 private:
  void ToHost();
  void ToDevice();

  std::shared_ptr<SyncedMemory> parent_;
  size_t offset_ = 0;
  size_t bytes_;
  int device_id_;
  void* host_ = nullptr;
  void* device_ = nullptr;
  // The stream the copies of device_ go on (a cudaStream_t): the current stream of the thread
  // that allocated it, i.e. its context's, where the kernels that use it run; nullptr: the
  // legacy default stream.
  void* stream_ = nullptr;
  Head head_ = Head::kUninitialized;
  uint64_t version_ = 0;
};

// Host memory held by all SyncedMemory buffers of the process now, and the most at any time
// since the start (or the last reset): the host twin of cuda::AllocatedBytes.
size_t HostAllocatedBytes();
size_t HostPeakAllocatedBytes();
void ResetHostPeakAllocatedBytes();

}  // namespace cortado
