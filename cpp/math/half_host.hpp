// SPDX-License-Identifier: Apache-2.0
// float32 to and from float16 (IEEE binary16) and bfloat16 on the host, bit by bit: what the
// tcp backend puts on the wire when gradients travel in a half type (comm/communicator.hpp,
// WireType). Narrowing rounds to nearest, ties to even, as the GPU's __float2half_rn and
// __float2bfloat16_rn do; values beyond float16's range become infinities, NaN stays NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cortado::math {

inline uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline float BitsFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t FloatToBFloat16(float f) {
  const uint32_t bits = FloatBits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  // Adding 0x7FFF plus the lowest kept bit rounds the dropped half to nearest, ties to even; a
  // carry may reach the exponent (up to infinity), which is the correct rounding too.
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

inline float BFloat16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

inline uint16_t FloatToFloat16(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // infinity, or NaN (kept quiet, with what fits of its payload)
    return static_cast<uint16_t>(sign | 0x7C00u |
                                 (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0u));
  }
  // From 65520 (halfway between 65504, the largest float16, and the next power) up: infinity.
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (abs < 0x38800000u) {  // below 2^-14: a float16 subnormal (units of 2^-24), or zero
    if (abs < 0x33000000u) return sign;   // below 2^-25 (2^-25 itself ties to the even 0)
    const uint32_t exponent = abs >> 23;  // 102 (2^-25) to 112 (2^-15)
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // 24 to 14
    uint32_t q = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (q & 1u))) ++q;  // may become the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 bits to 10; a carry
  // into the exponent is the correct result (below 65520 it never reaches infinity).
  const uint32_t rebiased = abs - 0x38000000u;
  uint32_t q = rebiased >> 13;
  const uint32_t rest = rebiased & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

inline float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign != 0 ? -magnitude : magnitude;
  }
  // Infinity, or NaN: made quiet, as the conversion instructions do.
  if (exponent == 31) {
    return BitsFloat(sign | 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x400000u : 0u));
  }
  return BitsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// The same over arrays (cpu/half_host.cpp), with the CPU's F16C conversions where it has them
// (bit for bit the same results): dst[i] = FloatToFloat16(src[i]); dst[i] =
// Float16ToFloat(src[i]); and out[i] = FloatToFloat16(acc[i] + Float16ToFloat(in[i])).
void FloatsToFloat16(const float* src, size_t n, uint16_t* dst);
void Float16sToFloats(const uint16_t* src, size_t n, float* dst);
void AddToFloat16(const float* acc, const uint16_t* in, size_t n, uint16_t* out);

}  // namespace cortado::math
