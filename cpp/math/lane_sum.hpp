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

// The sums of `block` interleaved rows at once, as LaneSum sums each: value(i, l) is row l's
// i-th value (i < n), and totals[l] += LaneSum(n, value(., l)), bit for bit, for l < Block.
// Rows kept interleaved (a channel block's values, [i][l]) then sum with one vector operation
// per step instead of strided reads.
template <int Block, typename Value>
CORTADO_ALWAYS_INLINE inline void BlockLaneSum(int n, Value value, double* totals) {
  double row[Block] = {};
  int i = 0;
  for (; i + kSumBlock <= n; i += kSumBlock) {
    float lane[kSumLanes][Block] = {};
    for (int j = 0; j < kSumBlock; j += kSumLanes) {
      for (int k = 0; k < kSumLanes; ++k) {
        for (int l = 0; l < Block; ++l) lane[k][l] += value(i + j + k, l);
      }
    }
    for (int l = 0; l < Block; ++l) {
      row[l] += ((lane[0][l] + lane[1][l]) + (lane[2][l] + lane[3][l])) +
                ((lane[4][l] + lane[5][l]) + (lane[6][l] + lane[7][l]));
    }
  }
  for (; i < n; ++i) {
    for (int l = 0; l < Block; ++l) row[l] += value(i, l);
  }
  for (int l = 0; l < Block; ++l) totals[l] += row[l];
}

// Two such sums in one pass, as LaneSum2 sums each row: first_totals[l] += its first sum,
// second_totals[l] += its second.
template <int Block, typename First, typename Second>
CORTADO_ALWAYS_INLINE inline void BlockLaneSum2(int n, First first, Second second,
                                                double* first_totals, double* second_totals) {
  double a[Block] = {}, b[Block] = {};
  int i = 0;
  for (; i + kSumBlock <= n; i += kSumBlock) {
    float la[kSumLanes][Block] = {}, lb[kSumLanes][Block] = {};
    for (int j = 0; j < kSumBlock; j += kSumLanes) {
      for (int k = 0; k < kSumLanes; ++k) {
        for (int l = 0; l < Block; ++l) {
          la[k][l] += first(i + j + k, l);
          lb[k][l] += second(i + j + k, l);
        }
      }
    }
    for (int l = 0; l < Block; ++l) {
      a[l] += ((la[0][l] + la[1][l]) + (la[2][l] + la[3][l])) +
              ((la[4][l] + la[5][l]) + (la[6][l] + la[7][l]));
      b[l] += ((lb[0][l] + lb[1][l]) + (lb[2][l] + lb[3][l])) +
              ((lb[4][l] + lb[5][l]) + (lb[6][l] + lb[7][l]));
    }
  }
  for (; i < n; ++i) {
    for (int l = 0; l < Block; ++l) {
      a[l] += first(i, l);
      b[l] += second(i, l);
    }
  }
  for (int l = 0; l < Block; ++l) {
    first_totals[l] += a[l];
    second_totals[l] += b[l];
  }
}

}  // namespace cortado::math
