// SPDX-License-Identifier: Apache-2.0
// The 16-bit floating-point types of mixed precision on the GPU: what convolutions and inner
// products compute in (Context::half_compute) and what a tensor may keep its values in
// (Tensor::set_home_type). kNone: float32.
#pragma once

#include <cstddef>

namespace cortado {

enum class HalfType { kNone, kFloat16, kBFloat16 };

// Bytes per value: 4 for kNone (float32), 2 otherwise.
inline size_t ValueBytes(HalfType type) { return type == HalfType::kNone ? 4 : 2; }
// "float32", "float16" or "bfloat16".
const char* HalfTypeName(HalfType type);

}  // namespace cortado
