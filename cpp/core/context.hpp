// SPDX-License-Identifier: Apache-2.0
// Device and Context: where a net runs and the per-replica state that goes with it.
//
// A Context belongs to one solver thread (one replica): its device, its random number
// generator and, on CUDA, its stream and library handles. Layers reach it through
// Layer::context(). A Context is not thread-safe; each thread uses its own.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "core/half_type.hpp"

namespace cortado {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int id = 0;  // CUDA ordinal; 0 for the CPU

  static Device Cpu() { return {DeviceType::kCpu, 0}; }
  static Device Cuda(int ordinal) { return {DeviceType::kCuda, ordinal}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  std::string ToString() const;  // "cpu" or "cuda:N"
};

namespace cuda {
struct Resources;  // core/cuda.hpp
}  // namespace cuda

// The random engine every layer and filler draws from; seeded per context so runs repeat.
using Rng = std::mt19937;

class Context {
 public:
  // seed < 0 picks a seed from the clock and the device (as Caffe does without random_seed).
  explicit Context(Device device = Device::Cpu(), int64_t seed = -1);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Device& device() const { return device_; }
  Rng& rng() { return rng_; }
  // Seeds the host engine and, on CUDA, the device's counter-based generator.
  void Seed(int64_t seed);
  int64_t seed() const { return seed_; }

  // The CUDA stream, handles and random state of this context (core/cuda.hpp), created on
  // first use; throws unless the context is on a CUDA device in a CUDA build.
  cuda::Resources& cuda();

  // Makes this context's device the calling thread's current CUDA device, where tensors
  // allocate their device memory, and its stream the thread's current stream, on which device
  // memory allocated from now on orders its host-device copies (core/synced_memory.hpp); on
  // the CPU it clears the thread's current stream and gives the thread's OpenMP and BLAS work
  // cpu_threads() threads. A thread that computes with a context calls it before it builds or
  // runs anything with the context.
  void MakeCurrent();
  // Waits until the work queued on this context's stream is done; a no-op on the CPU.
  void Synchronize();

  // Whether CUDA matrix products and convolutions may run on TF32 tensor cores (the solver's
  // `precision: TF32`); false by default: strict float32, as Caffe and the CPU compute. Set it
  // before building nets, since convolutions choose their algorithms when their layers are set
  // up. The CPU ignores it.
  void set_allow_tf32(bool allow);
  bool allow_tf32() const { return allow_tf32_; }

  // The reduced precision CUDA convolutions (cuDNN) and inner products compute in (the solver's
  // `precision: FLOAT16 | BFLOAT16`): their operands are rounded to it, their sums kept in
  // float32, and the weights stay float32 (a net keeps activations in it between the layers
  // that compute in it: Net, Tensor::set_home_type). kNone by default. Like allow_tf32, set it
  // before building nets. The CPU ignores it.
  using HalfType = cortado::HalfType;
  void set_half_compute(HalfType type) { half_compute_ = type; }
  HalfType half_compute() const { return half_compute_; }

  // The CPU threads of the threads that compute with this context (MakeCurrent applies them):
  // set_cpu_threads(n > 0) gives them n; 0 (the default) follows the process's NumThreads().
  // The one place that sizes the OpenMP teams and BLAS calls of the layers; a thread that is
  // not a context's (a prefetcher, an exchange thread) runs no parallel math.
  void set_cpu_threads(int threads);
  int cpu_threads() const { return cpu_threads_ > 0 ? cpu_threads_ : NumThreads(); }

  // Threads for CPU math (OpenMP and BLAS) in this process; defaults to the cores this process
  // may use (OMP_NUM_THREADS where set).
  static int NumThreads();
  static void SetNumThreads(int threads);
  // Gives the calling thread's OpenMP teams and BLAS calls `threads` threads (> 0).
  static void UseThreads(int threads);
  // How OpenMP's idle threads wait in this process, and who chose it: "OMP_WAIT_POLICY=passive,
  // set by Cortado" (core/preload.cpp), the user's own setting, or OpenMP's default.
  static std::string OpenMpWait();

  // Number of CUDA devices visible; 0 in a build without CUDA or on a machine without a GPU.
  static int CudaDeviceCount();

 private:
  Device device_;
  Rng rng_;
  int64_t seed_ = 0;
  int cpu_threads_ = 0;
  bool allow_tf32_ = false;
  HalfType half_compute_ = HalfType::kNone;
  std::unique_ptr<cuda::Resources> cuda_;
};

}  // namespace cortado
