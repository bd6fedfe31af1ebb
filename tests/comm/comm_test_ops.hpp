// SPDX-License-Identifier: Apache-2.0
// The operations every communicator backend must get right, for the backends' test suites: each
// checks its results against sums in double (or the bytes sent) and folds everything received
// into a digest, equal on every rank when the ranks end bit-identical.
#pragma once

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/ring.hpp"
#include "core/error.hpp"
#include "math/half_host.hpp"
#include "support/spawn_ranks.hpp"

namespace cortado::testing {

using comm::Communicator;

inline bool AllOk(const std::vector<RankOutcome>& outcomes) {
  for (const auto& o : outcomes) {
    if (!o.ok) return false;
  }
  return true;
}

// Rank `rank`'s input of `count` floats in [-1, 1) for test case `seed`.
inline std::vector<float> Input(int rank, size_t count, uint32_t seed) {
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(rank) * 104729u + 17u);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> data(count);
  for (auto& x : data) x = uniform(rng);
  return data;
}

inline std::string Pattern(size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(bytes, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// FNV-1a over everything a rank ends with: equal across ranks iff bit-identical.
class Digest {
 public:
  void Add(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) hash_ = (hash_ ^ p[i]) * 1099511628211ull;
    Add64(bytes);
  }
  std::string Hex() const { return std::to_string(hash_); }

 private:
  void Add64(uint64_t v) {
    for (int i = 0; i < 8; ++i) hash_ = (hash_ ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
  uint64_t hash_ = 14695981039346656037ull;
};

inline void Expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

inline void CheckAllReduce(Communicator* comm, size_t count, uint32_t seed, Digest* digest) {
  const int n = comm->size();
  std::vector<float> data = Input(comm->rank(), count, seed);
  comm->AllReduce(data.data(), count);
  std::vector<double> expected(count, 0.0);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> input = Input(r, count, seed);
    for (size_t i = 0; i < count; ++i) expected[i] += input[i];
  }
  for (size_t i = 0; i < count; ++i) {
    if (!(std::fabs(data[i] - expected[i]) <= 1e-5 * n)) {
      throw std::runtime_error("allreduce of " + std::to_string(count) + " floats: element " +
                               std::to_string(i) + " is " + std::to_string(data[i]) +
                               ", expected " + std::to_string(expected[i]));
    }
  }
  digest->Add(data.data(), count * sizeof(float));
}

// What AllReduceAs(wire) leaves in element i by the ring: its segment's first rank sends its
// value rounded to the wire type, and each next rank adds its own float32 value and rounds again.
inline float RingSumOnTheWire(const std::vector<std::vector<float>>& inputs, size_t count, size_t i,
                              comm::WireType wire) {
  const int n = static_cast<int>(inputs.size());
  const bool bf16 = wire == comm::WireType::kBFloat16;
  auto narrow = [&](float x) { return bf16 ? math::FloatToBFloat16(x) : math::FloatToFloat16(x); };
  auto widen = [&](uint16_t h) {
    return bf16 ? math::BFloat16ToFloat(h) : math::Float16ToFloat(h);
  };
  const comm::RingSegments segments(count, n);
  int j = 0;
  while (i >= segments.begin(j) + segments.size(j)) ++j;
  uint16_t v = narrow(inputs[j][i]);
  for (int k = 1; k < n; ++k) v = narrow(inputs[(j + k) % n][i] + widen(v));
  return widen(v);
}

// AllReduceAs(wire) by the ring of `count` values, each rank's Input (element 3 of 7 is 40000,
// which overflows float16 once summed over 2 ranks), every element exactly as
// RingSumOnTheWire gives it (one rank: the values stay). Throws naming the first that is not.
inline void CheckAllReduceOnTheWire(Communicator* comm, size_t count, comm::WireType wire,
                                    Digest* digest) {
  const int n = comm->size();
  const auto seed = static_cast<uint32_t>(count + 7);
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < n; ++r) {
    inputs.push_back(Input(r, count, seed));
    if (count == 7) inputs.back()[3] = 40000.0f;
  }
  std::vector<float> data = inputs[comm->rank()];
  comm->AllReduceAs(data.data(), count, wire);
  for (size_t i = 0; i < count; ++i) {
    const float want = n == 1 ? inputs[0][i] : RingSumOnTheWire(inputs, count, i, wire);
    if (!(data[i] == want || (std::isnan(data[i]) && std::isnan(want)))) {
      throw std::runtime_error("count " + std::to_string(count) + ", element " + std::to_string(i) +
                               ": " + std::to_string(data[i]) + ", expected " +
                               std::to_string(want));
    }
  }
  digest->Add(data.data(), count * sizeof(float));
}

// A 16-bit wire's case list on one rank: CheckAllReduceOnTheWire for 0, 1, 7, 1001 and 300000
// values, then a float32 AllReduce (exact again: the wire's buffer is the communicator's own).
// The digest of everything received, equal on every rank.
inline std::string ExerciseSixteenBitWire(Communicator* comm, comm::WireType wire) {
  Expect(comm->SupportsWire(wire), std::string(comm->backend()) + " carries a 16-bit wire");
  Digest digest;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{300000}}) {
    CheckAllReduceOnTheWire(comm, count, wire, &digest);
  }
  CheckAllReduce(comm, 1001, 5, &digest);
  return digest.Hex();
}

inline void CheckBroadcast(Communicator* comm, size_t bytes, int root, uint32_t seed,
                           Digest* digest) {
  const std::string want = Pattern(bytes, seed);
  std::string data = comm->rank() == root ? want : std::string(bytes, '\xee');
  comm->Broadcast(data.data(), bytes, root);
  Expect(data == want, "broadcast of " + std::to_string(bytes) + " bytes from rank " +
                           std::to_string(root) + " differs on rank " +
                           std::to_string(comm->rank()));
  digest->Add(data.data(), data.size());
}

// Blocks of differing lengths, every third one empty, the last rank's large (many chunks).
inline std::string Block(int rank, int n, uint32_t seed) {
  if (rank % 3 == 1) return "";
  const size_t bytes = (rank * 1237 + seed * 31) % 5000 + (rank == n - 1 ? 100000 : 0);
  return Pattern(bytes, seed * 131 + static_cast<uint32_t>(rank));
}

inline void CheckAllGather(Communicator* comm, uint32_t seed, bool empty, Digest* digest) {
  const int n = comm->size();
  const std::vector<std::string> blocks =
      comm->AllGather(empty ? std::string() : Block(comm->rank(), n, seed));
  Expect(static_cast<int>(blocks.size()) == n, "allgather returned a wrong number of blocks");
  for (int r = 0; r < n; ++r) {
    Expect(blocks[r] == (empty ? std::string() : Block(r, n, seed)),
           "allgather: rank " + std::to_string(comm->rank()) + " has a wrong block of rank " +
               std::to_string(r));
    digest->Add(blocks[r].data(), blocks[r].size());
  }
}

// Every operation, in an order all ranks share; throws on a wrong result and returns a digest
// of everything received (equal on every rank when they end bit-identical).
inline std::string ExerciseAllOps(Communicator* comm) {
  const int n = comm->size();
  Digest digest;
  // 0, 1, an odd size below N for some N, one not divisible by N, and one of many chunks.
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{300000}}) {
    CheckAllReduce(comm, count, static_cast<uint32_t>(count), &digest);
  }
  for (int root = 0; root < n; ++root) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{13}, size_t{100003}}) {
      CheckBroadcast(comm, bytes, root, static_cast<uint32_t>(bytes + root), &digest);
    }
  }
  CheckAllGather(comm, 1, false, &digest);
  CheckAllGather(comm, 2, true, &digest);
  CheckAllGather(comm, 3, false, &digest);
  comm->Barrier();
  // A mixed sequence, back to back: a rank that finishes an operation early starts sending the
  // next one while its neighbours still finish theirs.
  std::mt19937 script(2024);
  for (int i = 0; i < 40; ++i) {
    const uint32_t seed = 1000 + static_cast<uint32_t>(i);
    switch (script() % 4) {
      case 0:
        CheckAllReduce(comm, script() % 20000, seed, &digest);
        break;
      case 1:
        CheckBroadcast(comm, script() % 20000, static_cast<int>(script() % n), seed, &digest);
        break;
      case 2:
        CheckAllGather(comm, seed, script() % 5 == 0, &digest);
        break;
      default:
        comm->Barrier();
    }
  }
  return digest.Hex();
}

// A rank's part in a killed-peer test: AllReduce of `floats` values again and again, rank
// `killed` SIGKILLing itself before its fourth; returns how the first failing call ended, as
// "code|seconds|message" (ParseFailure reads it), or "never failed".
inline std::string AllReduceUntilFailure(Communicator* comm, int killed, size_t floats) {
  std::vector<float> data(floats, 1.0f);
  for (int i = 0; i < 100000; ++i) {
    if (comm->rank() == killed && i == 3) ::raise(SIGKILL);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->AllReduce(data.data(), data.size());
    } catch (const Error& e) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return std::to_string(static_cast<int>(e.code())) + "|" + std::to_string(seconds) + "|" +
             e.what();
    }
  }
  return "never failed";
}

struct Failure {
  int code = -1;
  double seconds = -1;
  std::string message;
};

// What AllReduceUntilFailure returned; throws when it is no such report.
inline Failure ParseFailure(const std::string& report) {
  const size_t bar1 = report.find('|');
  const size_t bar2 = bar1 == std::string::npos ? bar1 : report.find('|', bar1 + 1);
  Expect(bar2 != std::string::npos, "not a failure report: " + report);
  return {std::stoi(report.substr(0, bar1)), std::stod(report.substr(bar1 + 1, bar2 - bar1 - 1)),
          report.substr(bar2 + 1)};
}

// What is wrong with a run in which rank `killed` raised SIGKILL in AllReduceUntilFailure: it
// must have died by the signal, every other rank have failed with kComm within timeout_s + 1
// seconds, and at least one of them have named `name` ("rank 1 (host:port)"). Empty when all
// holds.
inline std::string CheckKilledRankRun(const std::vector<RankOutcome>& outcomes, int killed,
                                      double timeout_s, const std::string& name) {
  std::string problems;
  if (outcomes[killed].ok || outcomes[killed].error != "killed by signal 9") {
    problems +=
        "rank " + std::to_string(killed) + " was not killed: " + outcomes[killed].error + "\n";
  }
  bool named = false;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (static_cast<int>(r) == killed) continue;
    if (!outcomes[r].ok) {
      problems += "rank " + std::to_string(r) + " ended badly: " + outcomes[r].error + "\n";
      continue;
    }
    const Failure failure = ParseFailure(outcomes[r].result);
    if (failure.code != static_cast<int>(ErrorCode::kComm) || !(failure.seconds < timeout_s + 1)) {
      problems += "rank " + std::to_string(r) + ": " + outcomes[r].result + "\n";
    }
    named |= failure.message.find(name) != std::string::npos;
  }
  if (!named) problems += "no rank named " + name + "\n";
  return problems;
}

}  // namespace cortado::testing
