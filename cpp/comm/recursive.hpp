// SPDX-License-Identifier: Apache-2.0
// Recursive doubling and recursive halving for AllReduce, over any backend that can make one
// transfer with one partner at a time (the tcp and ucx backends), and the choice between them
// and the ring (CommOptions::allreduce_algorithm).
//
// With p the largest power of two not above the world's n ranks, rank r < p has a partner at
// each level k < log2 p, rank r ^ 2^k; a rank r >= p has one partner, r - p, which also has it as
// its fold partner. Ranks past p hand their buffer to their fold partner first and take the sum
// back last (two steps of the whole buffer, in float32), so that the levels run among p ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace cortado::comm {

enum class Algorithm { kRing, kDoubling, kHalving, kAuto };

// CommOptions::allreduce_algorithm; kInvalidArgument naming `backend` for another name.
Algorithm ParseAlgorithm(const std::string& backend, const std::string& name);

// Halving's bytes cost this much more than the ring's: measured between network namespaces
// with 4 and 8 ranks, 1 and 10 Gbit/s links, 1-64 MiB, halving took 0.8-1.23 of the ring's time
// (1.13-1.23 at 1 Gbit/s on 8 ranks), where its fewer steps save little (bench/RESULTS.md):
// each level's transfer ends before the next begins, where the ring's pieces flow on.
constexpr double kHalvingByteCost = 1.2;

// How an allreduce of n ranks goes (never kAuto), by the cost model of
// CommOptions::allreduce_algorithm, each step costing latency_bytes plus its bytes: the ring's
// 2 (n - 1) steps of ring_bytes / n; doubling's log2 p steps of float32_bytes (two steps more
// when the ranks past p fold in); halving's 2 log2 p steps moving 2 (p - 1) / p of ring_bytes (the
// wire's values) in all, at kHalvingByteCost (and the same two folding steps, in float32).
Algorithm Choose(Algorithm algorithm, int n, size_t ring_bytes, size_t float32_bytes,
                 size_t latency_bytes, size_t doubling_max_bytes);

// How AllReduce goes for Describe(): "ring", "doubling", "halving" (on two ranks, the ring's
// steps, said so), "auto (a step costs 32 KB)".
std::string DescribeAlgorithm(Algorithm algorithm, int n, size_t latency_bytes);

// The largest power of two not above n (n >= 1).
int LargestPowerOfTwo(int n);

// The partners of rank q among n ranks, in the order every rank makes its connections to them:
// the levels, then the fold partner (rank q + p, or q - p for a rank past p, which has no level).
std::vector<int> DoublingPartners(int q, int n);

// One transfer with a partner, the backend's part of the algorithms below.
class PairExchange {
 public:
  static constexpr int kFold = -1;
  virtual ~PairExchange() = default;
  // With the partner of `level` (0 .. log2 p - 1, or kFold): sends send_bytes from `send` and
  // receives recv_bytes into `recv` (0: none), the received floats added into `recv` when `sum`
  // (it must not overlap `send`). On a 16-bit `wire` both buffers hold wire values and a summed
  // receive writes the rounded sum of each received value and the float32 at the same place in
  // `accumulate`.
  virtual void ExchangeWith(int level, const void* send, size_t send_bytes, void* recv,
                            size_t recv_bytes, bool sum, WireType wire = WireType::kFloat32,
                            const float* accumulate = nullptr) = 0;
};

// AllReduce of `count` floats at `data` by recursive doubling: at each level both partners send
// their whole buffer and add the other's (the same sum, bit for bit, on both). Float32 values.
// `theirs` is scratch space.
void RecursiveDoubling(PairExchange* pairs, int rank, int n, float* data, size_t count,
                       std::vector<float>* theirs);

// AllReduce by recursive halving (a reduce-scatter: at level k the partners split the part they
// share, each keeping a half and adding the other's copy of it) then recursive doubling of the
// parts (an all-gather, the levels in reverse): 2 log2 p steps moving the ring's bytes. On a
// 16-bit wire the halves go as wire values: each level adds the partner's rounded partial sum to
// this rank's float32 one and rounds the result, which the next level sends on; the all-gather
// copies the owners' rounded sums. The fold stays float32. `wire_values` is scratch space.
void RecursiveHalvingDoubling(PairExchange* pairs, int rank, int n, float* data, size_t count,
                              WireType wire, std::vector<uint16_t>* wire_values);

// AllReduceAs by `algorithm` (Choose's answer) when it is doubling or halving: true when it ran,
// false for the ring (nothing done, the backend's own). Halving carries the wire's values;
// doubling (small buffers) float32 values, the sum rounded to a 16-bit wire's type once at the
// end. `theirs` and `wire_values` are scratch space.
bool RecursiveAllReduce(Algorithm algorithm, PairExchange* pairs, int rank, int n, float* data,
                        size_t count, WireType wire, std::vector<float>* theirs,
                        std::vector<uint16_t>* wire_values);

}  // namespace cortado::comm
