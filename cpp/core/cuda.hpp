// SPDX-License-Identifier: Apache-2.0
// CUDA plumbing shared by every .cu file and by the C++ code that talks to the CUDA runtime:
// the error-checking macros, the kernel launch shape, and a Context's CUDA resources (its
// stream, library handles and counter-based random state). Include only where
// CORTADO_WITH_CUDA is 1.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/config.hpp"
#include "core/context.hpp"
#include "core/error.hpp"

#if CORTADO_WITH_CURAND
#include <curand.h>
#endif
#if CORTADO_WITH_CUBLAS
#include <cublas_v2.h>
#endif
#if CORTADO_WITH_CUDNN
#include <cudnn.h>
#endif

namespace cortado {
namespace cuda {

// Threads per block for element-wise kernels, and the grid that covers n elements with
// grid-stride loops (capped: each thread then handles several elements).
constexpr int kThreads = 256;
inline int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

[[noreturn]] void ThrowCudaError(cudaError_t status, const char* what, const char* file, int line);
#if CORTADO_WITH_CURAND
[[noreturn]] void ThrowCurandError(curandStatus_t status, const char* what, const char* file,
                                   int line);
#endif
#if CORTADO_WITH_CUBLAS
[[noreturn]] void ThrowCublasError(cublasStatus_t status, const char* what, const char* file,
                                   int line);
#endif
#if CORTADO_WITH_CUDNN
[[noreturn]] void ThrowCudnnError(cudnnStatus_t status, const char* what, const char* file,
                                  int line);
#endif

// The device this thread is on, for messages ("cuda:0").
int CurrentDevice();

// The stream of the CUDA context last made current on this thread (Context::MakeCurrent), or
// nullptr (none, a CPU context, or that context is gone). Device memory allocated by this
// thread orders its host-device copies on it (core/synced_memory.hpp).
cudaStream_t CurrentStream();
void SetCurrentStream(cudaStream_t stream);
// Whether `stream` belongs to a context that still exists.
bool IsLiveStream(cudaStream_t stream);

// Device memory through Cortado's own accounting: Malloc throws kOutOfMemory naming the device,
// the size and `what`; the counters cover every device of the process.
void* Malloc(size_t bytes, const char* what);
void Free(void* ptr, size_t bytes) noexcept;
size_t AllocatedBytes();      // now
size_t PeakAllocatedBytes();  // the most at any time since the start (or the last reset)
void ResetPeakAllocatedBytes();

// Per-context CUDA state. Created on the context's device the first time it is asked for.
struct Resources {
  explicit Resources(int device);
  ~Resources();
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;

  // Scratch device memory of at least `bytes` (grown, never shrunk); shared by the layers of
  // one context, so only one layer may use it at a time (layers run one after another).
  void* Workspace(size_t bytes);
  // Scratch for the float16/bfloat16 copies of a layer's operands under mixed precision
  // (Context::half_compute), apart from Workspace so both can be used at once; the same rules.
  void* HalfScratch(size_t bytes);
  // How many times HalfScratch was called: a caller that finds it one more than when it last
  // wrote the scratch knows that nothing else has written it since.
  uint64_t half_scratch_calls() const { return half_scratch_calls_; }
  // Lets cuBLAS's float32 products run on TF32 tensor cores, or keeps them strict float32 (the
  // default). Context::set_allow_tf32 calls it.
  void SetAllowTf32(bool allow);
  // A small device buffer (kReduceSlots floats) for the partial sums of reductions, and a
  // pinned host float their result comes back through.
  static constexpr int kReduceSlots = 1024;
  float* ReduceBuffer();
  float* HostResult();

  int device;
  cudaStream_t stream = nullptr;
#if CORTADO_WITH_CUBLAS
  cublasHandle_t cublas = nullptr;
#endif
#if CORTADO_WITH_CUDNN
  cudnnHandle_t cudnn = nullptr;
#endif
  // Random numbers: cuRAND's Philox4x32-10 generator on the stream where the build has cuRAND,
  // else our own Philox4x32-10 kernels (math/cuda/random.cu), where every draw of n numbers uses
  // counters [offset, offset + n) under key `seed` and then advances offset. Either way a seed
  // fixes the sequence.
#if CORTADO_WITH_CURAND
  curandGenerator_t curand = nullptr;
#endif
  uint64_t philox_seed = 0;
  uint64_t philox_offset = 0;
  // Restarts the sequence under `seed`.
  void SeedRandom(uint64_t seed);
  // Plans that users keep per context, by their own keys (the cuDNN convolution plans of each
  // shape); released before the handles they were made with.
  std::unordered_map<std::string, std::shared_ptr<const void>> plans;

 private:
  // `buffer` (of `capacity` bytes) grown to at least `bytes`, after the stream has finished
  // with the old one; never shrunk.
  void* Grow(void*& buffer, size_t& capacity, size_t bytes, const char* what);

  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* half_scratch_ = nullptr;
  size_t half_scratch_bytes_ = 0;
  uint64_t half_scratch_calls_ = 0;
  float* reduce_ = nullptr;
  float* host_result_ = nullptr;
};

// The context's CUDA resources; throws if the context is not on a CUDA device.
Resources& Get(Context& ctx);
inline cudaStream_t Stream(Context& ctx) { return Get(ctx).stream; }

}  // namespace cuda
}  // namespace cortado

// CORTADO_CUDA_CHECK(cudaMemcpyAsync(...)): throws kCuda with the call and the runtime's text.
#define CORTADO_CUDA_CHECK(call)                                                        \
  do {                                                                                  \
    const cudaError_t cortado_cuda_status_ = (call);                                    \
    if (cortado_cuda_status_ != cudaSuccess)                                            \
      ::cortado::cuda::ThrowCudaError(cortado_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports a bad launch configuration (not the kernel's own faults,
// which surface at the next synchronising call).
#define CORTADO_CUDA_CHECK_LAUNCH() CORTADO_CUDA_CHECK(cudaGetLastError())

#define CORTADO_CUBLAS_CHECK(call)                                                          \
  do {                                                                                      \
    const cublasStatus_t cortado_cublas_status_ = (call);                                   \
    if (cortado_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                    \
      ::cortado::cuda::ThrowCublasError(cortado_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CORTADO_CURAND_CHECK(call)                                                          \
  do {                                                                                      \
    const curandStatus_t cortado_curand_status_ = (call);                                   \
    if (cortado_curand_status_ != CURAND_STATUS_SUCCESS)                                    \
      ::cortado::cuda::ThrowCurandError(cortado_curand_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CORTADO_CUDNN_CHECK(call)                                                         \
  do {                                                                                    \
    const cudnnStatus_t cortado_cudnn_status_ = (call);                                   \
    if (cortado_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                    \
      ::cortado::cuda::ThrowCudnnError(cortado_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (0)

// for (i over [0, n)) as a grid-stride loop inside a kernel.
#define CORTADO_KERNEL_LOOP(i, n)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
