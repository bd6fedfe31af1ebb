// SPDX-License-Identifier: Apache-2.0
// Element-by-element conversions between float32 and a 16-bit type (core/half_type.hpp), in
// the same layout, rounding to nearest even: on the host (cpu/half_host.cpp) and, in a build
// with CUDA, on the GPU (cuda/half.cu) on `stream` (a cudaStream_t; nullptr: the legacy default
// stream). Tensor converts its twins with them.
#pragma once

#include <cstdint>

#include "core/half_type.hpp"

namespace cortado::math {

void FloatsToHalfHost(HalfType type, int64_t count, const float* src, void* dst);
void HalfToFloatsHost(HalfType type, int64_t count, const void* src, float* dst);
void FloatsToHalfGpu(void* stream, HalfType type, int64_t count, const float* src, void* dst);
void HalfToFloatsGpu(void* stream, HalfType type, int64_t count, const void* src, float* dst);

// The same between float32 [n, c, hw] (NCHW) and a 16-bit [n, hw, c] (NHWC): Tensor's twins of a
// channels-last home (Tensor::home_nhwc).
void FloatsToHalfNhwcHost(HalfType type, int n, int c, int hw, const float* src, void* dst);
void HalfNhwcToFloatsHost(HalfType type, int n, int c, int hw, const void* src, float* dst);
void FloatsToHalfNhwcGpu(void* stream, HalfType type, int n, int c, int hw, const float* src,
                         void* dst);
void HalfNhwcToFloatsGpu(void* stream, HalfType type, int n, int c, int hw, const void* src,
                         float* dst);

}  // namespace cortado::math
