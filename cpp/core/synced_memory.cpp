// SPDX-License-Identifier: Apache-2.0
#include "core/synced_memory.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/logging.hpp"

#if CORTADO_WITH_CUDA
#include "core/cuda.hpp"
#endif

namespace cortado {
namespace {

constexpr size_t kAlignment = 64;

std::atomic<size_t> host_allocated{0};
std::atomic<size_t> host_peak{0};
std::atomic<size_t> host_limit{0};  // 0: the physical memory

size_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return SIZE_MAX;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

void* AllocateHost(size_t bytes) {
  const size_t limit = HostMemoryLimit();
  const size_t held = host_allocated.load();
  if (bytes > limit || held > limit - bytes) {
    CORTADO_THROW(kOutOfMemory,
                  "cannot allocate {} bytes of host memory: tensors already hold {} bytes and "
                  "the limit is {} bytes ({})",
                  bytes, held, limit,
                  host_limit.load() == 0 ? "this machine's memory" : "SetHostMemoryLimit");
  }
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (ptr == nullptr) {
    CORTADO_THROW(kOutOfMemory, "cannot allocate {} bytes of host memory", bytes);
  }
  std::memset(ptr, 0, bytes);
  const size_t now = host_allocated.fetch_add(bytes) + bytes;
  size_t seen = host_peak.load();
  while (now > seen && !host_peak.compare_exchange_weak(seen, now)) {
  }
  return ptr;
}

void FreeHost(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  std::free(ptr);
  host_allocated.fetch_sub(bytes);
}

#if CORTADO_WITH_CUDA
void CudaCheck(cudaError_t status, const char* what) {
  if (status != cudaSuccess) cuda::ThrowCudaError(status, what, __FILE__, __LINE__);
}

// Device memory on the calling thread's current device (the one its context set); `stream`
// becomes the thread's current stream (Context::MakeCurrent), where its copies will go.
void* AllocateDevice(size_t bytes, int* device, void** stream) {
  CudaCheck(cudaGetDevice(device), "cudaGetDevice");
  *stream = cuda::CurrentStream();
  return cuda::Malloc(bytes, "a tensor");
}

// The stream the copies of a buffer go on: the one recorded at its allocation while its context
// lives; nullptr (the legacy default stream, which waits for every blocking stream) once that
// context is gone, or when none was current.
cudaStream_t CopyStream(void** stream) {
  if (*stream == nullptr) return nullptr;
  auto s = static_cast<cudaStream_t>(*stream);
  if (!cuda::IsLiveStream(s)) {
    *stream = nullptr;
    return nullptr;
  }
  return s;
}

// Copies on the buffer's stream (CopyStream), after the kernels queued there, and waits for the
// copy: the host then reads the result, or may write its buffer again (an asynchronous copy
// from pageable memory is allowed to return before reading it). Without a stream, a plain copy
// on the legacy default stream.
void Copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind, void** stream,
          const char* what) {
  if (cudaStream_t s = CopyStream(stream)) {
    CudaCheck(cudaMemcpyAsync(to, from, bytes, kind, s), what);
    CudaCheck(cudaStreamSynchronize(s), what);
  } else {
    CudaCheck(cudaMemcpy(to, from, bytes, kind), what);
  }
}
#endif

}  // namespace

SyncedMemory::SyncedMemory(size_t bytes, int device_id) : bytes_(bytes), device_id_(device_id) {}

SyncedMemory::SyncedMemory(std::shared_ptr<SyncedMemory> parent, size_t offset, size_t bytes)
    : parent_(std::move(parent)), offset_(offset), bytes_(bytes) {
  CORTADO_CHECK(parent_ != nullptr, "a view of no memory");
  CORTADO_CHECK(offset <= parent_->size() && bytes <= parent_->size() - offset,
                "a view of bytes [{}, {}) of a buffer of {} bytes", offset, offset + bytes,
                parent_->size());
  device_id_ = parent_->device_id_;
}

size_t HostAllocatedBytes() { return host_allocated.load(); }
size_t HostPeakAllocatedBytes() { return host_peak.load(); }
void ResetHostPeakAllocatedBytes() { host_peak.store(host_allocated.load()); }

void SetHostMemoryLimit(size_t bytes) { host_limit.store(bytes); }

size_t HostMemoryLimit() {
  const size_t limit = host_limit.load();
  if (limit != 0) return limit;
  static const size_t physical = PhysicalMemoryBytes();
  return physical;
}

SyncedMemory::~SyncedMemory() {
  FreeHost(host_, bytes_);
#if CORTADO_WITH_CUDA
  cuda::Free(device_, bytes_);
#endif
}

void SyncedMemory::ToHost() {
  switch (head_) {
    case Head::kUninitialized:
      host_ = AllocateHost(bytes_);
      head_ = Head::kHost;
      break;
    case Head::kDevice:
#if CORTADO_WITH_CUDA
      if (host_ == nullptr) host_ = AllocateHost(bytes_);
      Copy(host_, device_, bytes_, cudaMemcpyDeviceToHost, &stream_, "device to host copy");
      head_ = Head::kSynced;
#endif
      break;
    case Head::kHost:
    case Head::kSynced:
      break;
  }
}

void SyncedMemory::ToDevice() {
#if CORTADO_WITH_CUDA
  switch (head_) {
    case Head::kUninitialized:
      device_ = AllocateDevice(bytes_, &device_id_, &stream_);
      if (cudaStream_t stream = CopyStream(&stream_)) {
        CudaCheck(cudaMemsetAsync(device_, 0, bytes_, stream), "cudaMemsetAsync");
      } else {
        CudaCheck(cudaMemset(device_, 0, bytes_), "cudaMemset");
      }
      head_ = Head::kDevice;
      break;
    case Head::kHost:
      if (device_ == nullptr) device_ = AllocateDevice(bytes_, &device_id_, &stream_);
      Copy(device_, host_, bytes_, cudaMemcpyHostToDevice, &stream_, "host to device copy");
      head_ = Head::kSynced;
      break;
    case Head::kDevice:
    case Head::kSynced:
      break;
  }
#else
  CORTADO_THROW(kUnimplemented, "device memory requested in a build without CUDA");
#endif
}

// A view hands out its parent's pointers, offset; the parent does the copying.
const void* SyncedMemory::host_data() {
  if (parent_) return static_cast<const char*>(parent_->host_data()) + offset_;
  ToHost();
  return host_;
}

void* SyncedMemory::mutable_host_data() {
  if (parent_) return static_cast<char*>(parent_->mutable_host_data()) + offset_;
  ToHost();
  head_ = Head::kHost;
  ++version_;
  return host_;
}

const void* SyncedMemory::device_data() {
  if (parent_) return static_cast<const char*>(parent_->device_data()) + offset_;
  ToDevice();
  return device_;
}

void* SyncedMemory::mutable_device_data() {
  if (parent_) return static_cast<char*>(parent_->mutable_device_data()) + offset_;
  ToDevice();
  head_ = Head::kDevice;
  ++version_;
  return device_;
}

}  // namespace cortado
