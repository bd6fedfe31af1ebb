// SPDX-License-Identifier: Apache-2.0
#include "tools/gpu_flag.hpp"

#include <cstdlib>

#include "core/config.hpp"
#include "core/error.hpp"
#include "tools/flags.hpp"

namespace cortado::tools {

std::vector<int> ParseGpuList(const std::string& value, int device_count, bool cuda_build) {
  if (!cuda_build) {
    CORTADO_THROW(kInvalidArgument,
                  "--gpu={}: this build of Cortado has no CUDA support (built without nvcc); run "
                  "without --gpu to use the CPU",
                  value);
  }
  const char* no_driver = device_count == 0 ? " (or no CUDA driver)" : "";
  std::vector<int> ordinals;
  if (value == "all") {
    if (device_count == 0) {
      CORTADO_THROW(kInvalidArgument, "--gpu=all: this machine has no CUDA device{}", no_driver);
    }
    for (int i = 0; i < device_count; ++i) ordinals.push_back(i);
    return ordinals;
  }
  for (const std::string& item : SplitList(value)) {
    char* end = nullptr;
    const long ordinal = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || ordinal < 0 || ordinal > 1 << 20) {
      CORTADO_THROW(kInvalidArgument,
                    "--gpu takes 'all' or a comma-separated list of CUDA device ordinals such as "
                    "0 or 0,1; got '{}' ('{}' is not an ordinal)",
                    value, item);
    }
    if (ordinal >= device_count) {
      CORTADO_THROW(kInvalidArgument,
                    "--gpu={}: CUDA device {} requested, but this machine has {} CUDA device(s){}",
                    value, ordinal, device_count, no_driver);
    }
    ordinals.push_back(static_cast<int>(ordinal));
  }
  if (ordinals.empty()) {
    CORTADO_THROW(kInvalidArgument,
                  "--gpu takes 'all' or a comma-separated list of CUDA device ordinals such as 0 "
                  "or 0,1; got '{}'",
                  value);
  }
  return ordinals;
}

std::vector<int> ParseGpuFlag(const std::string& value) {
  return ParseGpuList(value, Context::CudaDeviceCount(), CORTADO_WITH_CUDA != 0);
}

Device FirstGpu(const std::string& value) { return Device::Cuda(ParseGpuFlag(value).front()); }

caffe::SolverParameter::Precision ParsePrecisionFlag(const std::string& value) {
  if (value == "float32") return caffe::SolverParameter::FLOAT32;
  if (value == "tf32") return caffe::SolverParameter::TF32;
  if (value == "float16") return caffe::SolverParameter::FLOAT16;
  if (value == "bfloat16") return caffe::SolverParameter::BFLOAT16;
  CORTADO_THROW(kInvalidArgument, "--precision takes float32, tf32, float16 or bfloat16; got '{}'",
                value);
}

}  // namespace cortado::tools
