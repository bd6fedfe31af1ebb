// SPDX-License-Identifier: Apache-2.0
// The --gpu flag of `cortado train`, `test` and `time`, as in Caffe: --gpu=0, --gpu=0,1 or
// --gpu=all. It overrides solver_mode; `train` runs one replica per listed GPU (a GPU listed
// twice gets two replicas), `test` and `time` use the first.
#pragma once

#include <string>
#include <vector>

#include "core/context.hpp"
#include "proto/caffe.pb.h"

namespace cortado::tools {

// Parses a --gpu value into CUDA ordinals, in the order given; an ordinal may repeat. "all" is
// every one of the `device_count` devices. Throws kInvalidArgument, naming --gpu, for an empty
// or malformed value, an ordinal that is not below `device_count`, "all" without a device, and
// any value at all when `cuda_build` is false.
std::vector<int> ParseGpuList(const std::string& value, int device_count, bool cuda_build);

// ParseGpuList for this build and machine.
std::vector<int> ParseGpuFlag(const std::string& value);
// The device of `test` and `time`: the first GPU of a --gpu value.
Device FirstGpu(const std::string& value);

// The --precision flag of `train`, `test` and `time`: float32 (strict, the default), tf32
// (tensor cores on CUDA devices that have them), float16 or bfloat16 (mixed precision; see
// SolverParameter.precision). Throws
// kInvalidArgument, naming --precision and the values it takes, for anything else.
caffe::SolverParameter::Precision ParsePrecisionFlag(const std::string& value);
inline constexpr const char* kPrecisionHelp =
    "float32 (strict, as Caffe), tf32 (TF32 tensor cores for convolutions and matrix products on "
    "GPUs that have them), float16 or bfloat16 (convolutions and inner products in that type "
    "with float32 sums; float16 adds dynamic loss scaling when training)";

}  // namespace cortado::tools
