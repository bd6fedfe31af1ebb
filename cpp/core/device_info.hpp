// SPDX-License-Identifier: Apache-2.0
// What this process can compute on: CPU threads and libraries, and each CUDA device.
#pragma once

#include <string>
#include <vector>

namespace cortado {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-..."
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory = 0;
  int multiprocessors = 0;
};

// The CUDA devices visible to this process (empty without CUDA, a driver or a device).
std::vector<CudaDeviceInfo> QueryCudaDevices();

// Human-readable lines for `cortado device_query`: build options, CPU threads, BLAS,
// oneDNN, and one block per CUDA device.
std::vector<std::string> DescribeDevices();

}  // namespace cortado
