// SPDX-License-Identifier: Apache-2.0
// The tcp backend's operations on 1 to 5 ranks as threads, and on 3 ranks as processes: results
// against sums in double, every rank bit-identical to the others.
#include "comm/tcp/tcp_communicator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/ring.hpp"
#include "support/spawn_ranks.hpp"
#include "tcp_test_util.hpp"

namespace cortado::comm {
namespace {

using testing::Describe;
using testing::LoopbackRing;
using testing::RankOutcome;

bool AllOk(const std::vector<RankOutcome>& outcomes) {
  for (const auto& o : outcomes) {
    if (!o.ok) return false;
  }
  return true;
}

// Rank `rank`'s input of `count` floats in [-1, 1) for test case `seed`.
std::vector<float> Input(int rank, size_t count, uint32_t seed) {
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(rank) * 104729u + 17u);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> data(count);
  for (auto& x : data) x = uniform(rng);
  return data;
}

std::string Pattern(size_t bytes, uint32_t seed) {
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

void Expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void CheckAllReduce(Communicator* comm, size_t count, uint32_t seed, Digest* digest) {
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

void CheckBroadcast(Communicator* comm, size_t bytes, int root, uint32_t seed, Digest* digest) {
  const std::string want = Pattern(bytes, seed);
  std::string data = comm->rank() == root ? want : std::string(bytes, '\xee');
  comm->Broadcast(data.data(), bytes, root);
  Expect(data == want, "broadcast of " + std::to_string(bytes) + " bytes from rank " +
                           std::to_string(root) + " differs on rank " +
                           std::to_string(comm->rank()));
  digest->Add(data.data(), data.size());
}

// Blocks of differing lengths, every third one empty, the last rank's large (many chunks).
std::string Block(int rank, int n, uint32_t seed) {
  if (rank % 3 == 1) return "";
  const size_t bytes = (rank * 1237 + seed * 31) % 5000 + (rank == n - 1 ? 100000 : 0);
  return Pattern(bytes, seed * 131 + static_cast<uint32_t>(rank));
}

void CheckAllGather(Communicator* comm, uint32_t seed, bool empty, Digest* digest) {
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
std::string ExerciseAllOps(Communicator* comm) {
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

TEST(TcpRingSegmentsTest, SplitsAsEvenlyAsPossible) {
  for (size_t count : {0, 1, 2, 7, 1001}) {
    for (int n = 1; n <= 5; ++n) {
      const RingSegments segments(count, n);
      size_t next = 0;
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(segments.begin(i), next);
        EXPECT_LE(segments.size(i), count / n + 1);
        EXPECT_GE(segments.size(i), count / n);
        next += segments.size(i);
      }
      EXPECT_EQ(next, count) << count << " over " << n;
    }
  }
}

TEST(TcpCommunicatorTest, EveryOperationOnOneToFiveRanksAsThreads) {
  for (int n = 1; n <= 5; ++n) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    LoopbackRing ring(n);
    const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
      auto comm = ring.Join(rank);
      EXPECT_STREQ(comm->backend(), "tcp");
      EXPECT_EQ(comm->rank(), rank);
      EXPECT_EQ(comm->size(), n);
      return ExerciseAllOps(comm.get());
    });
    ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
    for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result) << "rank " << r;
  }
}

TEST(TcpCommunicatorTest, EveryOperationOnThreeRanksAsProcesses) {
  LoopbackRing ring(3);
  const auto outcomes = testing::RunRanksAsProcesses(
      3,
      [&](int rank) {
        ring.CloseOthers(rank);
        auto comm = ring.Join(rank);
        return ExerciseAllOps(comm.get());
      },
      /*timeout_s=*/60);
  ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  EXPECT_EQ(outcomes[1].result, outcomes[0].result);
  EXPECT_EQ(outcomes[2].result, outcomes[0].result);
}

TEST(TcpCommunicatorTest, OddChunkSizesSumCorrectly) {
  // Chunks of one float, of a size that is no whole number of floats, and one byte more than a
  // page.
  for (size_t chunk : {size_t{4}, size_t{10}, size_t{4097}}) {
    SCOPED_TRACE("chunk_bytes " + std::to_string(chunk));
    LoopbackRing ring(3);
    const auto outcomes = testing::RunRanksAsThreads(3, [&](int rank) {
      CommOptions options = ring.Options(rank);
      options.chunk_bytes = chunk;
      auto comm = ring.Join(options);
      Digest digest;
      for (size_t count : {size_t{5}, size_t{1001}, size_t{20000}}) {
        CheckAllReduce(comm.get(), count, 7, &digest);
      }
      return digest.Hex();
    });
    ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
    EXPECT_EQ(outcomes[1].result, outcomes[0].result);
    EXPECT_EQ(outcomes[2].result, outcomes[0].result);
  }
}

TEST(TcpCommunicatorTest, BarrierWaitsForEveryRank) {
  for (int n : {2, 3, 5}) {
    LoopbackRing ring(n);
    std::atomic<int> entered{0};
    constexpr int kRounds = 5;
    const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
      auto comm = ring.Join(rank);
      for (int round = 0; round < kRounds; ++round) {
        // One rank comes late to each barrier; nobody may leave before it arrives.
        if (rank == round % n) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        entered.fetch_add(1);
        comm->Barrier();
        const int seen = entered.load();
        Expect(seen >= n * (round + 1), "rank " + std::to_string(rank) + " left barrier " +
                                            std::to_string(round) + " having seen " +
                                            std::to_string(seen) + " entries");
      }
      return std::string();
    });
    ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  }
}

TEST(TcpCommunicatorTest, SeveralRingsInOneProcessAreIndependent) {
  // Two rings of 2 and 3 ranks at once, all ranks threads of this process.
  LoopbackRing a(2);
  LoopbackRing b(3);
  const auto outcomes = testing::RunRanksAsThreads(5, [&](int index) {
    auto comm = index < 2 ? a.Join(index) : b.Join(index - 2);
    return ExerciseAllOps(comm.get());
  });
  ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  EXPECT_EQ(outcomes[1].result, outcomes[0].result);
  EXPECT_EQ(outcomes[3].result, outcomes[2].result);
  EXPECT_EQ(outcomes[4].result, outcomes[2].result);
}

// Ports that were free a moment ago (the registry's factory listens on peers[rank] itself).
std::vector<std::string> FreeLoopbackPeers(int n) {
  std::vector<std::unique_ptr<TcpListener>> held;
  std::vector<std::string> peers;
  for (int i = 0; i < n; ++i) {
    held.push_back(TcpListener::Open("127.0.0.1", 0));
    peers.push_back("127.0.0.1:" + std::to_string(held.back()->port()));
  }
  return peers;
}

TEST(TcpCommunicatorTest, CreateCommunicatorBuildsTheTcpBackendByName) {
  const auto backends = CommunicatorBackends();
  EXPECT_NE(std::find(backends.begin(), backends.end(), "tcp"), backends.end());
  const std::vector<std::string> peers = FreeLoopbackPeers(3);
  const auto outcomes = testing::RunRanksAsThreads(3, [&](int rank) {
    CommOptions options;
    options.backend = "tcp";
    options.rank = rank;
    options.world_size = 3;
    options.peers = peers;
    options.token = "registry-test";
    options.connect_timeout_s = 10;
    options.timeout_s = 10;
    auto comm = CreateCommunicator(options);
    Digest digest;
    CheckAllReduce(comm.get(), 12345, 5, &digest);
    return digest.Hex();
  });
  ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  EXPECT_EQ(outcomes[1].result, outcomes[0].result);
}

TEST(TcpCommunicatorTest, OneRankNeedsNoPeers) {
  CommOptions options;
  options.world_size = 1;
  auto comm = CreateCommunicator(options);
  std::vector<float> data = {1.5f, -2.0f};
  comm->AllReduce(data.data(), data.size());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  comm->Broadcast(data.data(), sizeof(float), 0);
  EXPECT_EQ(comm->AllGather("x"), std::vector<std::string>{"x"});
  comm->Barrier();
}

}  // namespace
}  // namespace cortado::comm
