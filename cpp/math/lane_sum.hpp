// SPDX-License-Identifier: Apache-2.0
// Sums of long rows that vectorise without -ffast-math: eight independent float lanes over
// blocks of 64 values, each block's total added into a double. A plain double accumulator is
// one dependent addition per value (about four cycles each); this is about eight values per
// cycle, and the float lanes only ever hold eight values each, so the result is as good as the
// double sum for every purpose here. The order is fixed by n alone: the same row sums to the
// same bits on any thread count.
#pragma once

namespace cortado::math {

// Inlined wherever they are called, also into functions built for wider vectors
// (CORTADO_CPU_CLONES in math/math.hpp), which then sum with those.
#if defined(__GNUC__)
#define CORTADO_ALWAYS_INLINE [[gnu::always_inline]]
#else
#define CORTADO_ALWAYS_INLINE
#endif

inline constexpr int kSumLanes = 8;
inline constexpr int kSumBlock = 64;

namespace detail {
CORTADO_ALWAYS_INLINE inline float AddLanes(const float (&lane)[kSumLanes]) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
}  // namespace detail

// sum over i < n of value(i), where value(i) returns a float.
template <typename Value>
CORTADO_ALWAYS_INLINE inline double LaneSum(int n, Value value) {
  double total = 0.0;
  int i = 0;
  for (; i + kSumBlock <= n; i += kSumBlock) {
    float lane[kSumLanes] = {};
    for (int j = 0; j < kSumBlock; j += kSumLanes) {
      for (int k = 0; k < kSumLanes; ++k) lane[k] += value(i + j + k);
    }
    total += detail::AddLanes(lane);
  }
  for (; i < n; ++i) total += value(i);
  return total;
}

// Two sums in one pass: {sum of first(i), sum of second(i)}.
template <typename First, typename Second>
CORTADO_ALWAYS_INLINE inline void LaneSum2(int n, First first, Second second, double* first_sum,
                                           double* second_sum) {
  double a = 0.0, b = 0.0;
  int i = 0;
  for (; i + kSumBlock <= n; i += kSumBlock) {
    float la[kSumLanes] = {}, lb[kSumLanes] = {};
    for (int j = 0; j < kSumBlock; j += kSumLanes) {
      for (int k = 0; k < kSumLanes; ++k) {
        la[k] += first(i + j + k);
        lb[k] += second(i + j + k);
      }
    }
    a += detail::AddLanes(la);
    b += detail::AddLanes(lb);
  }
  for (; i < n; ++i) {
    a += first(i);
    b += second(i);
  }
  *first_sum = a;
  *second_sum = b;
}

}  // namespace cortado::math
