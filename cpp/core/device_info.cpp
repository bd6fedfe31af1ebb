// SPDX-License-Identifier: Apache-2.0
#include "core/device_info.hpp"

#include <fmt/format.h>

#include "core/config.hpp"
#include "core/context.hpp"

#if CORTADO_WITH_CUDA
#include <cuda_runtime.h>
#endif
#if CORTADO_WITH_ONEDNN
#include <dnnl.h>
#endif

extern "C" char* openblas_get_config();

namespace cortado {

std::vector<CudaDeviceInfo> QueryCudaDevices() {
  std::vector<CudaDeviceInfo> devices;
#if CORTADO_WITH_CUDA
  const int count = Context::CudaDeviceCount();
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    CudaDeviceInfo info;
    info.ordinal = i;
    info.name = prop.name;
    std::string uuid = "GPU-";
    for (int b = 0; b < 16; ++b) {
      if (b == 4 || b == 6 || b == 8 || b == 10) uuid += '-';
      uuid += fmt::format("{:02x}", static_cast<unsigned char>(prop.uuid.bytes[b]));
    }
    info.uuid = uuid;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.total_memory = prop.totalGlobalMem;
    info.multiprocessors = prop.multiProcessorCount;
    devices.push_back(info);
  }
#endif
  return devices;
}

std::vector<std::string> DescribeDevices() {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("Cortado {}: CUDA {}, cuDNN {}, NCCL {}, MPI {}, oneDNN {}, HDF5 {}",
                              CORTADO_VERSION, CORTADO_WITH_CUDA ? "on" : "off",
                              CORTADO_WITH_CUDNN ? "on" : "off", CORTADO_WITH_NCCL ? "on" : "off",
                              CORTADO_WITH_MPI ? "on" : "off", CORTADO_WITH_ONEDNN ? "on" : "off",
                              CORTADO_WITH_HDF5 ? "on" : "off"));
  lines.push_back(fmt::format("CPU: {} thread(s); OpenMP's idle threads: {}", Context::NumThreads(),
                              Context::OpenMpWait()));
  lines.push_back(fmt::format("BLAS: {}", openblas_get_config()));
#if CORTADO_WITH_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  lines.push_back(fmt::format("oneDNN: {}.{}.{} (cpu runtime {})", v->major, v->minor, v->patch,
                              v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other"));
#endif
  const auto devices = QueryCudaDevices();
  if (devices.empty()) {
    lines.push_back(CORTADO_WITH_CUDA ? "CUDA: no device visible" : "CUDA: not built");
  }
  for (const auto& d : devices) {
    lines.push_back(fmt::format("Device id:                     {}", d.ordinal));
    lines.push_back(fmt::format("Name:                          {}", d.name));
    lines.push_back(fmt::format("UUID:                          {}", d.uuid));
    lines.push_back(
        fmt::format("Compute capability:            {}.{}", d.compute_major, d.compute_minor));
    lines.push_back(fmt::format("Total global memory:           {} MiB", d.total_memory >> 20));
    lines.push_back(fmt::format("Multiprocessors:               {}", d.multiprocessors));
  }
  return lines;
}

}  // namespace cortado
