// SPDX-License-Identifier: Apache-2.0
// What recursive doubling and recursive halving leave in each element, written from the
// algorithms' definitions (comm/recursive.hpp): the references of the tcp and ucx backends'
// tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm_test_ops.hpp"
#include "math/half_host.hpp"

namespace cortado::testing {

// Element i of each of the first p ranks (p the largest power of two not above the ranks) once
// the ranks past p have added theirs into rank r - p, in float32: where both algorithms start.
inline std::vector<float> FoldedIn(const std::vector<std::vector<float>>& inputs, size_t i) {
  const int n = static_cast<int>(inputs.size());
  int p = 1;
  while (p * 2 <= n) p *= 2;
  std::vector<float> v(p);
  for (int q = 0; q < p; ++q) v[q] = inputs[q][i];
  for (int q = p; q < n; ++q) v[q - p] += inputs[q][i];
  return v;
}

// Element i after recursive doubling over `inputs` (one vector per rank), written from the
// algorithm's definition: ranks past the largest power of two p add into rank r - p, then at
// each level every rank adds its partner's partial sum. Halving adds the same partial sums at
// each level (only the rank that keeps element i does), so its result is the same.
inline float DoublingSum(const std::vector<std::vector<float>>& inputs, size_t i) {
  std::vector<float> v = FoldedIn(inputs, i);
  const int p = static_cast<int>(v.size());
  for (int bit = 1; bit < p; bit <<= 1) {
    std::vector<float> next(p);
    for (int q = 0; q < p; ++q) next[q] = v[q] + v[q ^ bit];
    v = next;
  }
  return v[0];
}

inline float RoundTo(comm::WireType wire, float x) {
  return wire == comm::WireType::kBFloat16 ? math::BFloat16ToFloat(math::FloatToBFloat16(x))
                                           : math::Float16ToFloat(math::FloatToFloat16(x));
}

// Element i of `count` after recursive halving then doubling on a 16-bit wire, written from the
// algorithm's definition: the folded ranks add in float32; at level k each rank splits the part
// it shares with its partner (rank q ^ 2^k) and keeps the lower half where bit k of q is 0; the
// rank that keeps element i adds the partner's partial sum as sent (rounded to the wire type)
// to its own and rounds the result; the rank left holding element i gives everyone its value.
inline float HalvingSum16(const std::vector<std::vector<float>>& inputs, size_t count, size_t i,
                          comm::WireType wire) {
  std::vector<float> v = FoldedIn(inputs, i);
  const int p = static_cast<int>(v.size());
  std::vector<size_t> begin(p, 0), end(p, count);
  for (int bit = 1; bit < p; bit <<= 1) {
    std::vector<float> next = v;
    for (int q = 0; q < p; ++q) {
      const size_t mid = begin[q] + (end[q] - begin[q]) / 2;
      const bool lower = (q & bit) == 0;
      const size_t keep = lower ? begin[q] : mid, keep_end = lower ? mid : end[q];
      if (keep <= i && i < keep_end) next[q] = RoundTo(wire, v[q] + RoundTo(wire, v[q ^ bit]));
      begin[q] = keep;
      end[q] = keep_end;
    }
    v = next;
  }
  for (int q = 0; q < p; ++q) {
    if (begin[q] <= i && i < end[q]) return v[q];
  }
  throw std::logic_error("no rank holds element " + std::to_string(i));
}

inline std::vector<std::vector<float>> Inputs(int n, size_t count, uint32_t seed) {
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(Input(r, count, seed));
  return inputs;
}

}  // namespace cortado::testing
