// SPDX-License-Identifier: Apache-2.0
// Device helpers shared by the GPU passes that reduce per channel (BatchNorm, Scale): a fast
// division by a launch-constant divisor, loads and stores of 1 or 4 values (float, or a 16-bit
// type widened to float and rounded back to nearest even; 8 values of a 16-bit type too), and a
// block-wide sum of two doubles in a fixed order. Include only from .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/cuda.hpp"

namespace cortado::cuda {

// n / d for 0 <= n < 2^31 by a multiply and a shift (d > 0 fixed for a launch).
struct FastDiv {
  uint32_t divisor, magic, shift;
  explicit FastDiv(uint32_t d) : divisor(d), shift(0) {
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t Div(uint32_t n) const {
    return (__umulhi(n, magic) + n) >> shift;
  }
};

template <int V>
struct Pack {
  float v[V];
};

template <int V>
__device__ __forceinline__ Pack<V> Load(const float* p, int64_t unit) {
  Pack<V> r;
  if constexpr (V == 4) {
    const float4 f = reinterpret_cast<const float4*>(p)[unit];
    r.v[0] = f.x;
    r.v[1] = f.y;
    r.v[2] = f.z;
    r.v[3] = f.w;
  } else {
    r.v[0] = p[unit];
  }
  return r;
}

template <int V>
__device__ __forceinline__ void Store(float* p, int64_t unit, const Pack<V>& r) {
  if constexpr (V == 4) {
    reinterpret_cast<float4*>(p)[unit] = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else {
    p[unit] = r.v[0];
  }
}

// A 16-bit type's bits <-> float, rounding to nearest even.
template <typename H>
struct HalfBits;
template <>
struct HalfBits<__half> {
  static __device__ __forceinline__ float Widen(uint32_t bits) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
  static __device__ __forceinline__ uint32_t Narrow(float v) {
    return __half_as_ushort(__float2half_rn(v));
  }
};
template <>
struct HalfBits<__nv_bfloat16> {
  static __device__ __forceinline__ float Widen(uint32_t bits) {
    return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
  }
  static __device__ __forceinline__ uint32_t Narrow(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

// V == 4: four 16-bit values as one 8-byte access (p 8-byte aligned), the first in the low bits;
// V == 8: eight as one 16-byte access (p 16-byte aligned).
template <int V, typename H>
__device__ __forceinline__ Pack<V> LoadHalf(const H* p, int64_t unit) {
  Pack<V> r;
  if constexpr (V == 8) {
    const uint4 bits = reinterpret_cast<const uint4*>(p)[unit];
    const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.v[2 * i] = HalfBits<H>::Widen(words[i] & 0xffffu);
      r.v[2 * i + 1] = HalfBits<H>::Widen(words[i] >> 16);
    }
  } else if constexpr (V == 4) {
    const uint2 bits = reinterpret_cast<const uint2*>(p)[unit];
    r.v[0] = HalfBits<H>::Widen(bits.x & 0xffffu);
    r.v[1] = HalfBits<H>::Widen(bits.x >> 16);
    r.v[2] = HalfBits<H>::Widen(bits.y & 0xffffu);
    r.v[3] = HalfBits<H>::Widen(bits.y >> 16);
  } else {
    r.v[0] = HalfBits<H>::Widen(reinterpret_cast<const unsigned short*>(p)[unit]);
  }
  return r;
}

template <int V, typename H>
__device__ __forceinline__ void StoreHalf(H* p, int64_t unit, const Pack<V>& r) {
  if constexpr (V == 8) {
    uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      words[i] = HalfBits<H>::Narrow(r.v[2 * i]) | HalfBits<H>::Narrow(r.v[2 * i + 1]) << 16;
    }
    reinterpret_cast<uint4*>(p)[unit] = make_uint4(words[0], words[1], words[2], words[3]);
  } else if constexpr (V == 4) {
    reinterpret_cast<uint2*>(p)[unit] =
        make_uint2(HalfBits<H>::Narrow(r.v[0]) | HalfBits<H>::Narrow(r.v[1]) << 16,
                   HalfBits<H>::Narrow(r.v[2]) | HalfBits<H>::Narrow(r.v[3]) << 16);
  } else {
    reinterpret_cast<unsigned short*>(p)[unit] =
        static_cast<unsigned short>(HalfBits<H>::Narrow(r.v[0]));
  }
}

template <int V>
__device__ __forceinline__ Pack<V> Load(const __half* p, int64_t unit) {
  return LoadHalf<V>(p, unit);
}
template <int V>
__device__ __forceinline__ Pack<V> Load(const __nv_bfloat16* p, int64_t unit) {
  return LoadHalf<V>(p, unit);
}
template <int V>
__device__ __forceinline__ void Store(__half* p, int64_t unit, const Pack<V>& r) {
  StoreHalf<V>(p, unit, r);
}
template <int V>
__device__ __forceinline__ void Store(__nv_bfloat16* p, int64_t unit, const Pack<V>& r) {
  StoreHalf<V>(p, unit, r);
}

// The block's sums of a and b (blockDim.x == cuda::kThreads), in a fixed order; valid in
// thread 0.
__device__ inline double2 BlockSum2(double a, double b) {
  __shared__ double2 warp_sums[cuda::kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, offset);
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = make_double2(a, b);
  __syncthreads();
  if (warp == 0) {
    a = lane < cuda::kThreads / 32 ? warp_sums[lane].x : 0.0;
    b = lane < cuda::kThreads / 32 ? warp_sums[lane].y : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) {
      a += __shfl_down_sync(0xffffffffu, a, offset);
      b += __shfl_down_sync(0xffffffffu, b, offset);
    }
  }
  return make_double2(a, b);
}

// The chunking of a [outer, channels, inner] tensor, read V values at a time, for per-channel
// reductions: the units of channel c are q in [0, outer * inner / V), row n = q / (inner / V),
// at ((n * channels + c) * (inner / V) + q % (inner / V)); each block takes chunk_units of them.
struct ChannelLayout {
  int channels, parts, chunk_units;
  uint32_t units;  // outer * inner / V
  FastDiv rows;    // divides by inner / V
  __device__ __forceinline__ int64_t At(uint32_t q, int c) const {
    const uint32_t n = rows.Div(q);
    return (static_cast<int64_t>(n) * channels + c) * rows.divisor + (q - n * rows.divisor);
  }
};

// `chunk` values of a channel per block.
inline ChannelLayout MakeChannelLayout(int outer, int channels, int inner, int v, int chunk) {
  const int row_units = inner / v;
  const uint32_t units = static_cast<uint32_t>(outer) * row_units;
  const int chunk_units = chunk / v;
  ChannelLayout layout{channels, 0, chunk_units, units, FastDiv(row_units > 0 ? row_units : 1)};
  layout.parts = units == 0 ? 1 : static_cast<int>((units + chunk_units - 1) / chunk_units);
  return layout;
}

}  // namespace cortado::cuda
