// SPDX-License-Identifier: Apache-2.0
// Kernels templated on the type a tensor's values are read and written in (float, or the
// 16-bit type of Layer::HalfTensors): conversions to and from float32, where the arithmetic
// stays, and the typed views of a tensor's data and diff.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda.hpp"
#include "core/error.hpp"
#include "core/half_type.hpp"
#include "core/tensor.hpp"

namespace cortado::half_values {

__device__ __forceinline__ float Widen(float v) { return v; }
__device__ __forceinline__ float Widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float Widen(__nv_bfloat16 v) { return __bfloat162float(v); }

// Rounded to nearest even.
template <typename T>
__device__ __forceinline__ T Narrow(float v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

// V values of type T moved as one load or store (8 bytes for four 16-bit values).
template <typename T, int V>
struct alignas(V * sizeof(T)) Vec {
  T v[V];
};
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> LoadVec(const T* p, int64_t unit) {
  return reinterpret_cast<const Vec<T, V>*>(p)[unit];
}
template <typename T, int V>
__device__ __forceinline__ void StoreVec(T* p, int64_t unit, const Vec<T, V>& r) {
  reinterpret_cast<Vec<T, V>*>(p)[unit] = r;
}

// Blocks of cuda::kThreads for a grid-stride loop over `units` (at most 65535).
inline int PackBlocks(int64_t units) {
  return static_cast<int>(
      std::min<int64_t>((units + cuda::kThreads - 1) / cuda::kThreads, int64_t{65535}));
}

// Whether p can be read and written four values of T at a time (16 bytes for float, 8 for 16
// bits); null passes.
template <typename T>
bool PackAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % (4 * sizeof(T)) == 0;
}

// Element-wise passes over n values in packs of four where every pointer allows (`aligned`),
// then one at a time: launch(std::integral_constant<int, V>, units, first element).
template <typename Launch>
void InPacksOfFour(int64_t n, bool aligned, Launch&& launch) {
  int64_t done = 0;
  if (aligned && n >= 4) {
    launch(std::integral_constant<int, 4>{}, n / 4, int64_t{0});
    done = n / 4 * 4;
  }
  if (n > done) launch(std::integral_constant<int, 1>{}, n - done, done);
}

// Calls f(T{}) with T the storage type for `type`: float for kNone.
template <typename F>
void WithValueType(HalfType type, F&& f) {
  switch (type) {
    case HalfType::kFloat16:
      f(__half{});
      return;
    case HalfType::kBFloat16:
      f(__nv_bfloat16{});
      return;
    case HalfType::kNone:
      f(0.0f);
      return;
  }
  CORTADO_THROW(kInternal, "unknown half type {}", static_cast<int>(type));
}

// A tensor's values as T: its float32 view for float, else its view in `type`.
template <typename T>
const T* Data(const Tensor& t, HalfType type) {
  if constexpr (std::is_same_v<T, float>) {
    return t.gpu_data();
  } else {
    return static_cast<const T*>(t.gpu_half_data(type));
  }
}
template <typename T>
T* MutableData(Tensor& t, HalfType type) {
  if constexpr (std::is_same_v<T, float>) {
    return t.mutable_gpu_data();
  } else {
    return static_cast<T*>(t.mutable_gpu_half_data(type));
  }
}
template <typename T>
const T* Diff(const Tensor& t, HalfType type) {
  if constexpr (std::is_same_v<T, float>) {
    return t.gpu_diff();
  } else {
    return static_cast<const T*>(t.gpu_half_diff(type));
  }
}
template <typename T>
T* MutableDiff(Tensor& t, HalfType type) {
  if constexpr (std::is_same_v<T, float>) {
    return t.mutable_gpu_diff();
  } else {
    return static_cast<T*>(t.mutable_gpu_half_diff(type));
  }
}

}  // namespace cortado::half_values
