// SPDX-License-Identifier: Apache-2.0
// The host's float16 and bfloat16 conversions (math/half_host.hpp): every 16-bit value comes
// back from float32 unchanged, and narrowing picks the nearest value, ties to even, checked
// against a search over all of the type's values.
#include "math/half_host.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace cortado::math {
namespace {

TEST(HalfHostTest, EverySixteenBitValueSurvivesTheRoundTrip) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto value = static_cast<uint16_t>(h);
    const float f16 = Float16ToFloat(value);
    const float b16 = BFloat16ToFloat(value);
    if (std::isnan(f16)) {
      EXPECT_TRUE(std::isnan(Float16ToFloat(FloatToFloat16(f16)))) << h;
    } else {
      ASSERT_EQ(FloatToFloat16(f16), value) << h;
    }
    if (std::isnan(b16)) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(b16)))) << h;
    } else {
      ASSERT_EQ(FloatToBFloat16(b16), value) << h;
    }
  }
}

TEST(HalfHostTest, KnownValues) {
  EXPECT_EQ(Float16ToFloat(0x3C00), 1.0f);
  EXPECT_EQ(Float16ToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(Float16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Float16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(BFloat16ToFloat(0x3F80), 1.0f);
  // Ties go to even: 1 + 2^-11 to 1, 1 + 3 * 2^-11 to 1 + 2^-9; bfloat16: 1 + 2^-8 to 1.
  EXPECT_EQ(Float16ToFloat(FloatToFloat16(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(Float16ToFloat(FloatToFloat16(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  // float16's range: 65519 rounds to 65504, 65520 (the tie) to infinity; 2^-25 (a tie) to 0,
  // a little more to the smallest subnormal.
  EXPECT_EQ(Float16ToFloat(FloatToFloat16(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(Float16ToFloat(FloatToFloat16(65520.0f))));
  EXPECT_TRUE(std::isinf(Float16ToFloat(FloatToFloat16(-1e10f))));
  EXPECT_EQ(FloatToFloat16(std::ldexp(1.0f, -25)), 0);
  EXPECT_EQ(FloatToFloat16(std::ldexp(1.5f, -25)), 1);
  EXPECT_EQ(FloatToFloat16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(Float16ToFloat(FloatToFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}

// The nearest of `sorted` (finite values of a type, ascending, with their codes) to x, ties to
// the even code.
uint16_t Nearest(const std::vector<std::pair<float, uint16_t>>& sorted, float x) {
  auto hi = std::lower_bound(sorted.begin(), sorted.end(), std::make_pair(x, uint16_t{0}),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
  if (hi == sorted.begin()) return hi->second;
  if (hi == sorted.end()) return std::prev(hi)->second;
  auto lo = std::prev(hi);
  const double below = static_cast<double>(x) - lo->first;
  const double above = static_cast<double>(hi->first) - x;
  if (below < above) return lo->second;
  if (above < below) return hi->second;
  return (lo->second & 1) == 0 ? lo->second : hi->second;
}

TEST(HalfHostTest, NarrowingPicksTheNearestValueTiesToEven) {
  std::vector<std::pair<float, uint16_t>> f16, b16;
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto code = static_cast<uint16_t>(h);
    // Non-negative finite values; -0 left out (the sign is handled apart).
    if (h < 0x8000 && std::isfinite(Float16ToFloat(code)))
      f16.push_back({Float16ToFloat(code), code});
    if (h < 0x8000 && std::isfinite(BFloat16ToFloat(code)))
      b16.push_back({BFloat16ToFloat(code), code});
  }
  auto by_value = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::sort(f16.begin(), f16.end(), by_value);
  std::sort(b16.begin(), b16.end(), by_value);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> exponent(-30, 16);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(mantissa(rng), exponent(rng));
    if (x < 65504.0f) {
      ASSERT_EQ(FloatToFloat16(x), Nearest(f16, x)) << x;
    }
    ASSERT_EQ(FloatToBFloat16(x), Nearest(b16, x)) << x;
    ASSERT_EQ(FloatToFloat16(-x) & 0x7FFF, FloatToFloat16(x)) << x;
  }
  // Exact ties between neighbours (the midpoints themselves).
  for (size_t k = 0; k + 1 < f16.size(); k += 7) {
    const float mid =
        static_cast<float>((static_cast<double>(f16[k].first) + f16[k + 1].first) / 2);
    ASSERT_EQ(FloatToFloat16(mid), Nearest(f16, mid)) << mid;
  }
}

// The array conversions (F16C where the CPU has it) give the scalar functions' bits, for every
// kind of value: random bit patterns cover NaNs, infinities, subnormals and overflow, and a
// third of the floats are small enough to become float16 subnormals.
TEST(HalfHostTest, ArrayConversionsMatchTheScalarOnes) {
  std::mt19937 rng(9);
  constexpr size_t kCount = 100003;  // not a multiple of 8: the scalar tail runs too
  std::vector<float> floats(kCount), acc(kCount);
  std::vector<uint16_t> halves(kCount);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (size_t i = 0; i < kCount; ++i) {
    floats[i] = BitsFloat(static_cast<uint32_t>(rng()));
    acc[i] = BitsFloat(static_cast<uint32_t>(rng()));
    halves[i] = static_cast<uint16_t>(rng());
    if (i % 3 == 0) floats[i] = std::ldexp(unit(rng), -15);
    if (i % 3 == 1) acc[i] = unit(rng);
  }
  std::vector<uint16_t> narrow(kCount), sum(kCount);
  std::vector<float> wide(kCount);
  FloatsToFloat16(floats.data(), kCount, narrow.data());
  Float16sToFloats(halves.data(), kCount, wide.data());
  AddToFloat16(acc.data(), halves.data(), kCount, sum.data());
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(narrow[i], FloatToFloat16(floats[i])) << i << " " << floats[i];
    ASSERT_EQ(FloatBits(wide[i]), FloatBits(Float16ToFloat(halves[i]))) << i;
    const uint16_t want = FloatToFloat16(acc[i] + Float16ToFloat(halves[i]));
    if ((want & 0x7FFF) > 0x7C00) {
      // Two NaNs added: which one's payload comes out is the CPU's choice.
      ASSERT_GT(sum[i] & 0x7FFF, 0x7C00) << i;
    } else {
      ASSERT_EQ(sum[i], want) << i;
    }
  }
}

}  // namespace
}  // namespace cortado::math
