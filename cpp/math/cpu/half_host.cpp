// SPDX-License-Identifier: Apache-2.0
// Array conversions of math/half_host.hpp. On x86-64 CPUs with F16C (every one since 2012-2013)
// eight values at a time with VCVTPS2PH / VCVTPH2PS, which round to nearest even and handle
// subnormals, infinities and NaN as IEEE 754 says: the scalar functions' results, bit for bit
// (half_host_test.cpp compares them). Elsewhere, the scalar functions.
#include "math/half_host.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "math/half_convert.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define CORTADO_HALF_F16C 1
#else
#define CORTADO_HALF_F16C 0
#endif

namespace cortado::math {
namespace {

#if CORTADO_HALF_F16C
// CPUID leaf 1: F16C and AVX, and the OS saving the YMM registers (OSXSAVE, then XCR0's SSE and
// AVX state bits). Asked directly: clang 14's __builtin_cpu_supports does not know "f16c".
bool HasF16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    const unsigned needed = (1u << 27) | (1u << 28) | (1u << 29);  // OSXSAVE, AVX, F16C
    if ((ecx & needed) != needed) return false;
    unsigned xcr0_low = 0, xcr0_high = 0;
    __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    return (xcr0_low & 6u) == 6u;
  }();
  return has;
}

__attribute__((target("avx,f16c"))) size_t NarrowF16c(const float* src, size_t n, uint16_t* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t WidenF16c(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t AddF16c(const float* acc, const uint16_t* in, size_t n,
                                                   uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wide = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    const __m256 sum = _mm256_add_ps(_mm256_loadu_ps(acc + i), wide);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(sum, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#endif

}  // namespace

void FloatsToFloat16(const float* src, size_t n, uint16_t* dst) {
  size_t i = 0;
#if CORTADO_HALF_F16C
  if (HasF16c()) i = NarrowF16c(src, n, dst);
#endif
  for (; i < n; ++i) dst[i] = FloatToFloat16(src[i]);
}

void Float16sToFloats(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
#if CORTADO_HALF_F16C
  if (HasF16c()) i = WidenF16c(src, n, dst);
#endif
  for (; i < n; ++i) dst[i] = Float16ToFloat(src[i]);
}

void AddToFloat16(const float* acc, const uint16_t* in, size_t n, uint16_t* out) {
  size_t i = 0;
#if CORTADO_HALF_F16C
  if (HasF16c()) i = AddF16c(acc, in, n, out);
#endif
  for (; i < n; ++i) out[i] = FloatToFloat16(acc[i] + Float16ToFloat(in[i]));
}

}  // namespace cortado::math

namespace cortado::math {

void FloatsToHalfHost(HalfType type, int64_t count, const float* src, void* dst) {
  auto* out = static_cast<uint16_t*>(dst);
  if (type == HalfType::kFloat16) {
    FloatsToFloat16(src, static_cast<size_t>(count), out);
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = FloatToBFloat16(src[i]);
  }
}

void HalfToFloatsHost(HalfType type, int64_t count, const void* src, float* dst) {
  const auto* in = static_cast<const uint16_t*>(src);
  if (type == HalfType::kFloat16) {
    Float16sToFloats(in, static_cast<size_t>(count), dst);
  } else {
    for (int64_t i = 0; i < count; ++i) dst[i] = BFloat16ToFloat(in[i]);
  }
}

void FloatsToHalfNhwcHost(HalfType type, int n, int c, int hw, const float* src, void* dst) {
  const int64_t plane = static_cast<int64_t>(c) * hw;
  std::vector<float> image(static_cast<size_t>(plane));
  auto* out = static_cast<uint16_t*>(dst);
  for (int img = 0; img < n; ++img) {
    const float* in = src + img * plane;
    for (int p = 0; p < hw; ++p) {
      for (int ch = 0; ch < c; ++ch) image[int64_t{p} * c + ch] = in[int64_t{ch} * hw + p];
    }
    FloatsToHalfHost(type, plane, image.data(), out + img * plane);
  }
}

void HalfNhwcToFloatsHost(HalfType type, int n, int c, int hw, const void* src, float* dst) {
  const int64_t plane = static_cast<int64_t>(c) * hw;
  std::vector<float> image(static_cast<size_t>(plane));
  const auto* in = static_cast<const uint16_t*>(src);
  for (int img = 0; img < n; ++img) {
    HalfToFloatsHost(type, plane, in + img * plane, image.data());
    float* out = dst + img * plane;
    for (int p = 0; p < hw; ++p) {
      for (int ch = 0; ch < c; ++ch) out[int64_t{ch} * hw + p] = image[int64_t{p} * c + ch];
    }
  }
}

}  // namespace cortado::math
