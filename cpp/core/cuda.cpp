// SPDX-License-Identifier: Apache-2.0
#include "core/cuda.hpp"

#include <atomic>
#include <mutex>
#include <unordered_set>

#include "core/logging.hpp"

namespace cortado::cuda {
namespace {

std::atomic<size_t> allocated{0};
std::atomic<size_t> peak{0};

}  // namespace

void* Malloc(size_t bytes, const char* what) {
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes == 0 ? 1 : bytes);
  if (status != cudaSuccess) {
    ThrowCudaError(status, fmt::format("allocating {} bytes for {}", bytes, what).c_str(), __FILE__,
                   __LINE__);
  }
  const size_t now = allocated.fetch_add(bytes) + bytes;
  size_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
  return ptr;
}

void Free(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  if (cudaFree(ptr) != cudaSuccess) {
    CORTADO_LOG_ERROR("cudaFree failed while releasing {} bytes", bytes);
    return;
  }
  allocated.fetch_sub(bytes);
}

size_t AllocatedBytes() { return allocated.load(); }
size_t PeakAllocatedBytes() { return peak.load(); }
void ResetPeakAllocatedBytes() { peak.store(allocated.load()); }

int CurrentDevice() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) return -1;
  return device;
}

void ThrowCudaError(cudaError_t status, const char* what, const char* file, int line) {
  const int device = CurrentDevice();
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so later calls on this thread go on working
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw Error(ErrorCode::kOutOfMemory,
                fmt::format("out of GPU memory on cuda:{} in {} ({} MiB free of {} MiB)", device,
                            what, free_bytes >> 20, total_bytes >> 20),
                file, line);
  }
  throw Error(ErrorCode::kCuda,
              fmt::format("CUDA error on cuda:{} in {}: {} ({})", device, what,
                          cudaGetErrorString(status), cudaGetErrorName(status)),
              file, line);
}

#if CORTADO_WITH_CURAND
void ThrowCurandError(curandStatus_t status, const char* what, const char* file, int line) {
  throw Error(ErrorCode::kCuda,
              fmt::format("cuRAND error on cuda:{} in {}: status {}", CurrentDevice(), what,
                          static_cast<int>(status)),
              file, line);
}
#endif

#if CORTADO_WITH_CUBLAS
void ThrowCublasError(cublasStatus_t status, const char* what, const char* file, int line) {
  throw Error(ErrorCode::kCuda,
              fmt::format("cuBLAS error on cuda:{} in {}: {}", CurrentDevice(), what,
                          cublasGetStatusString(status)),
              file, line);
}
#endif

#if CORTADO_WITH_CUDNN
void ThrowCudnnError(cudnnStatus_t status, const char* what, const char* file, int line) {
  throw Error(ErrorCode::kCuda,
              fmt::format("cuDNN error on cuda:{} in {}: {}", CurrentDevice(), what,
                          cudnnGetErrorString(status)),
              file, line);
}
#endif

namespace {

thread_local cudaStream_t current_stream = nullptr;

// The streams of live contexts: a thread whose current context was destroyed on another thread
// must not hand its stream to new memory.
std::mutex& LiveStreamsMutex() {
  static std::mutex mutex;
  return mutex;
}
std::unordered_set<cudaStream_t>& LiveStreams() {
  static std::unordered_set<cudaStream_t> streams;
  return streams;
}

}  // namespace

cudaStream_t CurrentStream() {
  if (current_stream == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(LiveStreamsMutex());
  if (LiveStreams().count(current_stream) == 0) current_stream = nullptr;
  return current_stream;
}

void SetCurrentStream(cudaStream_t stream) { current_stream = stream; }

bool IsLiveStream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(LiveStreamsMutex());
  return LiveStreams().count(stream) != 0;
}

Resources::Resources(int device_ordinal) : device(device_ordinal) {
  CORTADO_CUDA_CHECK(cudaSetDevice(device));
  // A blocking stream. SyncedMemory copies memory allocated while this context was current on
  // this stream (ordered after the kernels that wrote it); memory allocated on a thread with no
  // current context copies on the legacy default stream, which waits for blocking streams, so
  // host reads see finished results either way.
  CORTADO_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    std::lock_guard<std::mutex> lock(LiveStreamsMutex());
    LiveStreams().insert(stream);
  }
#if CORTADO_WITH_CUBLAS
  CORTADO_CUBLAS_CHECK(cublasCreate(&cublas));
  CORTADO_CUBLAS_CHECK(cublasSetStream(cublas, stream));
#endif
#if CORTADO_WITH_CUDNN
  CORTADO_CUDNN_CHECK(cudnnCreate(&cudnn));
  CORTADO_CUDNN_CHECK(cudnnSetStream(cudnn, stream));
#endif
#if CORTADO_WITH_CURAND
  CORTADO_CURAND_CHECK(curandCreateGenerator(&curand, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CORTADO_CURAND_CHECK(curandSetStream(curand, stream));
#endif
}

void Resources::SeedRandom(uint64_t seed) {
  philox_seed = seed;
  philox_offset = 0;
#if CORTADO_WITH_CURAND
  CORTADO_CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(curand, seed));
  CORTADO_CURAND_CHECK(curandSetGeneratorOffset(curand, 0));
#endif
}

Resources::~Resources() {
  // Destructors must not throw: failures here are logged only.
  if (current_stream == stream) current_stream = nullptr;
  {
    std::lock_guard<std::mutex> lock(LiveStreamsMutex());
    LiveStreams().erase(stream);
  }
  cudaSetDevice(device);
  plans.clear();
#if CORTADO_WITH_CURAND
  if (curand != nullptr) curandDestroyGenerator(curand);
#endif
#if CORTADO_WITH_CUDNN
  if (cudnn != nullptr) cudnnDestroy(cudnn);
#endif
#if CORTADO_WITH_CUBLAS
  if (cublas != nullptr) cublasDestroy(cublas);
#endif
  Free(workspace_, workspace_bytes_);
  Free(half_scratch_, half_scratch_bytes_);
  if (reduce_ != nullptr) cudaFree(reduce_);
  if (host_result_ != nullptr) cudaFreeHost(host_result_);
  if (stream != nullptr && cudaStreamDestroy(stream) != cudaSuccess) {
    CORTADO_LOG_ERROR("cudaStreamDestroy failed on cuda:{}", device);
  }
}

void Resources::SetAllowTf32(bool allow) {
#if CORTADO_WITH_CUBLAS
  CORTADO_CUBLAS_CHECK(
      cublasSetMathMode(cublas, allow ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
#else
  (void)allow;  // our own GEMM kernels compute in float32 only
#endif
}

void* Resources::Grow(void*& buffer, size_t& capacity, size_t bytes, const char* what) {
  if (bytes <= capacity) return buffer;
  if (buffer != nullptr) {
    CORTADO_CUDA_CHECK(cudaStreamSynchronize(stream));
    Free(buffer, capacity);
    buffer = nullptr;
    capacity = 0;
  }
  buffer = Malloc(bytes, what);
  capacity = bytes;
  return buffer;
}

void* Resources::Workspace(size_t bytes) {
  return Grow(workspace_, workspace_bytes_, bytes, "a layer workspace");
}

void* Resources::HalfScratch(size_t bytes) {
  ++half_scratch_calls_;
  return Grow(half_scratch_, half_scratch_bytes_, bytes, "mixed-precision operand copies");
}

float* Resources::ReduceBuffer() {
  if (reduce_ == nullptr) {
    CORTADO_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&reduce_), sizeof(float) * kReduceSlots));
  }
  return reduce_;
}

float* Resources::HostResult() {
  if (host_result_ == nullptr) {
    CORTADO_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_result_), sizeof(float)));
  }
  return host_result_;
}

Resources& Get(Context& ctx) { return ctx.cuda(); }

}  // namespace cortado::cuda
