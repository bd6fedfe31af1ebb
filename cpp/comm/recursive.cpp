// SPDX-License-Identifier: Apache-2.0
#include "comm/recursive.hpp"

#include <fmt/format.h>

#include <limits>
#include <utility>

#include "core/error.hpp"
#include "math/half_host.hpp"

namespace cortado::comm {

Algorithm ParseAlgorithm(const std::string& backend, const std::string& name) {
  if (name == "ring") return Algorithm::kRing;
  if (name == "doubling") return Algorithm::kDoubling;
  if (name == "halving") return Algorithm::kHalving;
  if (name == "auto") return Algorithm::kAuto;
  CORTADO_THROW(kInvalidArgument,
                "{}: allreduce_algorithm must be ring, doubling, halving or auto, not '{}'",
                backend, name);
}

int LargestPowerOfTwo(int n) {
  int power = 1;
  while (power * 2 <= n) power *= 2;
  return power;
}

namespace {

// log2 of LargestPowerOfTwo(n): the levels of doubling and halving.
int Levels(int n) {
  int levels = 0;
  while ((2 << levels) <= n) ++levels;
  return levels;
}

}  // namespace

Algorithm Choose(Algorithm algorithm, int n, size_t ring_bytes, size_t float32_bytes,
                 size_t latency_bytes, size_t doubling_max_bytes) {
  if (n <= 1 || algorithm == Algorithm::kRing) return Algorithm::kRing;
  if (algorithm == Algorithm::kHalving && n == 2) return Algorithm::kRing;  // the same steps
  if (algorithm != Algorithm::kAuto) return algorithm;
  const int power = LargestPowerOfTwo(n);
  const int levels = Levels(n);
  const double l = static_cast<double>(latency_bytes);
  const double b = static_cast<double>(float32_bytes);
  const double fold = power < n ? 2 * (l + b) : 0.0;
  const double ring = 2.0 * (n - 1) * (l + static_cast<double>(ring_bytes) / n);
  const double doubling = float32_bytes > doubling_max_bytes
                              ? std::numeric_limits<double>::infinity()
                              : levels * (l + b) + fold;
  // Two ranks: halving is the ring (one step each way of half the buffer).
  const double halving =
      n == 2 ? std::numeric_limits<double>::infinity()
             : 2.0 * levels * l +
                   kHalvingByteCost * 2.0 * (power - 1) / power * static_cast<double>(ring_bytes) +
                   fold;
  if (doubling <= halving && doubling < ring) return Algorithm::kDoubling;
  if (halving < ring) return Algorithm::kHalving;
  return Algorithm::kRing;
}

std::string DescribeAlgorithm(Algorithm algorithm, int n, size_t latency_bytes) {
  switch (algorithm) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kDoubling:
      return "doubling";
    case Algorithm::kHalving:
      return n == 2 ? "ring (halving's steps on two ranks)" : "halving";
    case Algorithm::kAuto:
      break;
  }
  return fmt::format("auto (a step costs {:g} KB)", static_cast<double>(latency_bytes) / 1024);
}

std::vector<int> DoublingPartners(int q, int n) {
  const int power = LargestPowerOfTwo(n);
  if (q >= power) return {q - power};
  std::vector<int> partners;
  for (int bit = 1; bit < power; bit <<= 1) partners.push_back(q ^ bit);
  if (q + power < n) partners.push_back(q + power);
  return partners;
}

namespace {

// The ranks past p hand their buffer to their fold partner and take the sum back (true: this
// rank is done); their partners add it into `data`.
bool FoldIn(PairExchange* pairs, int rank, int n, float* data, size_t count) {
  const int power = LargestPowerOfTwo(n);
  const size_t bytes = count * sizeof(float);
  if (rank >= power) {
    pairs->ExchangeWith(PairExchange::kFold, data, bytes, nullptr, 0, false);
    pairs->ExchangeWith(PairExchange::kFold, nullptr, 0, data, bytes, false);
    return true;
  }
  if (rank + power < n) {
    pairs->ExchangeWith(PairExchange::kFold, nullptr, 0, data, bytes, /*sum=*/true);
  }
  return false;
}

// The sum back to the fold partner, if any.
void FoldOut(PairExchange* pairs, int rank, int n, const float* data, size_t count) {
  if (rank + LargestPowerOfTwo(n) < n) {
    pairs->ExchangeWith(PairExchange::kFold, data, count * sizeof(float), nullptr, 0, false);
  }
}

}  // namespace

void RecursiveDoubling(PairExchange* pairs, int rank, int n, float* data, size_t count,
                       std::vector<float>* theirs) {
  const size_t bytes = count * sizeof(float);
  theirs->resize(count);
  if (FoldIn(pairs, rank, n, data, count)) return;
  // One swap per level: both ends add the other's buffer to their own, the same sum bit for bit
  // (received into a buffer of its own: the bytes sent are read while others arrive).
  for (int k = 0; k < Levels(n); ++k) {
    pairs->ExchangeWith(k, data, bytes, theirs->data(), bytes, false);
    const float* other = theirs->data();
    for (size_t i = 0; i < count; ++i) data[i] += other[i];
  }
  FoldOut(pairs, rank, n, data, count);
}

void RecursiveHalvingDoubling(PairExchange* pairs, int rank, int n, float* data, size_t count,
                              WireType wire, std::vector<uint16_t>* wire_values) {
  const int r = rank;
  if (FoldIn(pairs, rank, n, data, count)) return;
  // On a 16-bit wire, wire_values holds what goes out: first this rank's values rounded, then
  // at each level the rounded sums of the part it keeps (also widened into `data`, the float32
  // partial sums the next level adds to).
  const bool narrow = wire != WireType::kFloat32;
  const bool bf16 = wire == WireType::kBFloat16;
  std::vector<uint16_t>& wv = *wire_values;
  auto to_wire = [&](size_t begin, size_t end) {
    if (!bf16) return math::FloatsToFloat16(data + begin, end - begin, &wv[begin]);
    for (size_t i = begin; i < end; ++i) wv[i] = math::FloatToBFloat16(data[i]);
  };
  auto from_wire = [&](size_t begin, size_t end) {
    if (!bf16) return math::Float16sToFloats(&wv[begin], end - begin, data + begin);
    for (size_t i = begin; i < end; ++i) data[i] = math::BFloat16ToFloat(wv[i]);
  };
  const size_t value_bytes = narrow ? sizeof(uint16_t) : sizeof(float);
  if (narrow) {
    wv.resize(count);
    to_wire(0, count);
  }
  char* values = narrow ? reinterpret_cast<char*>(wv.data()) : reinterpret_cast<char*>(data);
  auto at = [&](size_t i) { return values + i * value_bytes; };
  const int levels = Levels(n);
  // Reduce-scatter by recursive halving: at level k the two partners split the part they share,
  // each sending the half the other keeps and adding the other's copy of its own half (as it
  // arrives); rank r keeps the lower half where bit k of r is 0. After the last level each rank
  // holds the whole sum of 1/p of the buffer, every element summed by one rank only.
  std::vector<std::pair<size_t, size_t>> parts;  // [begin, end) shared at each level
  size_t begin = 0, end = count;
  for (int k = 0; k < levels; ++k) {
    parts.emplace_back(begin, end);
    const size_t mid = begin + (end - begin) / 2;
    const bool lower = ((r >> k) & 1) == 0;
    const size_t keep = lower ? begin : mid, keep_end = lower ? mid : end;
    const size_t give = lower ? mid : begin, give_end = lower ? end : mid;
    pairs->ExchangeWith(k, at(give), (give_end - give) * value_bytes, at(keep),
                        (keep_end - keep) * value_bytes, /*sum=*/true, wire,
                        narrow ? data + keep : nullptr);
    if (narrow) from_wire(keep, keep_end);
    begin = keep;
    end = keep_end;
  }
  // All-gather by recursive doubling, the levels in reverse: each rank sends the part it holds
  // and receives its partner's, which together make the part of the level before.
  for (int k = levels; k-- > 0;) {
    const auto [part, part_end] = parts[static_cast<size_t>(k)];
    const size_t mid = part + (part_end - part) / 2;
    const bool lower = ((r >> k) & 1) == 0;
    const size_t other = lower ? mid : part, other_end = lower ? part_end : mid;
    pairs->ExchangeWith(k, at(begin), (end - begin) * value_bytes, at(other),
                        (other_end - other) * value_bytes, /*sum=*/false);
    if (narrow) from_wire(other, other_end);
    begin = part;
    end = part_end;
  }
  FoldOut(pairs, rank, n, data, count);
}

bool RecursiveAllReduce(Algorithm algorithm, PairExchange* pairs, int rank, int n, float* data,
                        size_t count, WireType wire, std::vector<float>* theirs,
                        std::vector<uint16_t>* wire_values) {
  if (algorithm == Algorithm::kHalving) {
    RecursiveHalvingDoubling(pairs, rank, n, data, count, wire, wire_values);
    return true;
  }
  if (algorithm != Algorithm::kDoubling) return false;
  RecursiveDoubling(pairs, rank, n, data, count, theirs);
  if (wire == WireType::kBFloat16) {
    for (size_t i = 0; i < count; ++i) {
      data[i] = math::BFloat16ToFloat(math::FloatToBFloat16(data[i]));
    }
  } else if (wire == WireType::kFloat16) {
    wire_values->resize(count);
    math::FloatsToFloat16(data, count, wire_values->data());
    math::Float16sToFloats(wire_values->data(), count, data);
  }
  return true;
}

}  // namespace cortado::comm
