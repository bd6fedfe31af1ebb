// SPDX-License-Identifier: Apache-2.0
#include "core/context.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/openmp_wait.hpp"

#if CORTADO_WITH_CUDA
#include "core/cuda.hpp"
#else
namespace cortado::cuda {
struct Resources {};  // nothing to hold without CUDA
}  // namespace cortado::cuda
#endif

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);
extern "C" const char* cortado_openmp_wait();  // core/preload.cpp
extern "C" int cortado_openmp_wait_restart();  // core/preload.cpp
extern "C" void cortado_openmp_wait_set();     // core/preload.cpp

namespace cortado {

std::string Device::ToString() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", id);
}

namespace {

int64_t ClockSeed() {
  static std::atomic<int64_t> counter{0};
  auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
  return (now ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15LL)) & 0x7fffffff;
}

std::atomic<int>& ThreadCount() {
  static std::atomic<int> threads{0};
  return threads;
}

}  // namespace

Context::Context(Device device, int64_t seed) : device_(device) {
  if (device_.is_cuda()) {
    int count = CudaDeviceCount();
    if (device_.id < 0 || device_.id >= count) {
      CORTADO_THROW(kInvalidArgument,
                    "CUDA device {} requested, but this machine has {} CUDA device(s){}",
                    device_.id, count, count == 0 ? " (or no CUDA driver)" : "");
    }
  }
  Seed(seed);
}

Context::~Context() = default;

void Context::Seed(int64_t seed) {
  seed_ = seed < 0 ? ClockSeed() : seed;
  rng_.seed(static_cast<Rng::result_type>(seed_));
#if CORTADO_WITH_CUDA
  if (cuda_) cuda_->SeedRandom(static_cast<uint64_t>(seed_));
#endif
}

void Context::set_allow_tf32(bool allow) {
  allow_tf32_ = allow;
#if CORTADO_WITH_CUDA
  if (cuda_) cuda_->SetAllowTf32(allow);
#endif
}

cuda::Resources& Context::cuda() {
#if CORTADO_WITH_CUDA
  if (!device_.is_cuda()) {
    CORTADO_THROW(kInternal, "CUDA resources asked of a context on {}", device_.ToString());
  }
  if (!cuda_) {
    cuda_ = std::make_unique<cuda::Resources>(device_.id);
    cuda_->SeedRandom(static_cast<uint64_t>(seed_));
    cuda_->SetAllowTf32(allow_tf32_);
  }
  return *cuda_;
#else
  CORTADO_THROW(kUnimplemented, "this build of Cortado has no CUDA support (built without nvcc)");
#endif
}

void Context::MakeCurrent() {
#if CORTADO_WITH_CUDA
  if (device_.is_cuda()) {
    CORTADO_CUDA_CHECK(cudaSetDevice(device_.id));
    cuda::SetCurrentStream(cuda().stream);
  } else {
    cuda::SetCurrentStream(nullptr);
  }
#endif
  if (device_.is_cpu()) UseThreads(cpu_threads());
}

void Context::set_cpu_threads(int threads) {
  CORTADO_CHECK_GE(threads, 0);
  cpu_threads_ = threads;
}

void Context::Synchronize() {
#if CORTADO_WITH_CUDA
  if (device_.is_cuda()) CORTADO_CUDA_CHECK(cudaStreamSynchronize(cuda().stream));
#endif
}

int Context::NumThreads() {
  int threads = ThreadCount().load();
  if (threads > 0) return threads;
  // OpenMP's default: OMP_NUM_THREADS (its first level) where set, else the cores this process
  // may use; read once, so that a thread that set its own count does not change it.
  static const int process_default = [] {
    const char* env = std::getenv("OMP_NUM_THREADS");
    const int from_env = env != nullptr ? std::atoi(env) : 0;
    return from_env > 0 ? from_env : std::max(1, omp_get_num_procs());
  }();
  return process_default;
}

void Context::SetNumThreads(int threads) {
  CORTADO_CHECK_GT(threads, 0);
  ThreadCount().store(threads);
  UseThreads(threads);
}

std::string Context::OpenMpWait() { return cortado_openmp_wait(); }

void RestartForOpenMpWait(char** argv) {
  if (cortado_openmp_wait_restart() == 0) return;
  cortado_openmp_wait_set();
  ::execv("/proc/self/exe", argv);
  // Not restarted: go on with OpenMP's default.
  ::unsetenv("OMP_WAIT_POLICY");
  ::unsetenv("CORTADO_OPENMP_WAIT");
}

void Context::UseThreads(int threads) {
  CORTADO_CHECK_GT(threads, 0);
  // OpenMP's team size is the calling thread's own setting. OpenBLAS keeps one count for the
  // process: its OpenMP build takes the caller's setting at each call, except that once the
  // count is 1 it stays 1 until set again (so a one-thread caller would leave every later
  // product on one thread): set it here too.
  omp_set_num_threads(threads);
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
}

int Context::CudaDeviceCount() {
#if CORTADO_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error: no driver or no device means zero devices
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

const char* HalfTypeName(HalfType type) {
  switch (type) {
    case HalfType::kFloat16:
      return "float16";
    case HalfType::kBFloat16:
      return "bfloat16";
    case HalfType::kNone:
      break;
  }
  return "float32";
}

}  // namespace cortado
