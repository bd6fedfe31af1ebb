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
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/ring.hpp"
#include "comm_test_ops.hpp"
#include "math/half_host.hpp"
#include "support/spawn_ranks.hpp"
#include "tcp_test_util.hpp"

namespace cortado::comm {
namespace {

using testing::AllOk;
using testing::CheckAllReduce;
using testing::Describe;
using testing::Digest;
using testing::ExerciseAllOps;
using testing::Expect;
using testing::LoopbackRing;
using testing::RankOutcome;

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

// Two ranks whose connections join different addresses (as two machines' would) send the data
// both ways over one connection; on one address they keep one connection each way. Every
// operation gives the same results either way, as processes.
TEST(TcpCommunicatorTest, TwoRanksOnTwoAddressesShareOneConnectionBothWays) {
  for (bool own_addresses : {true, false}) {
    SCOPED_TRACE(own_addresses ? "127.0.0.1 and 127.0.0.2" : "127.0.0.1 twice");
    LoopbackRing ring(2, own_addresses);
    const auto outcomes = testing::RunRanksAsProcesses(
        2,
        [&](int rank) {
          ring.CloseOthers(rank);
          auto comm = ring.Join(rank);
          const bool shared =
              comm->Describe().find("one connection both ways") != std::string::npos;
          Expect(shared == own_addresses, "rank " + std::to_string(rank) + ": " + comm->Describe());
          return ExerciseAllOps(comm.get());
        },
        /*timeout_s=*/60);
    ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
    EXPECT_EQ(outcomes[1].result, outcomes[0].result);
  }
}

// AllReduceAs in bfloat16 and float16: half the bytes on the wire, each rank's values and each
// partial sum rounded on the way, every rank with exactly the values the ring's order of
// summation gives (one rank: nothing travels, the values stay).
TEST(TcpCommunicatorTest, AllReduceOnASixteenBitWireSumsInTheRingsOrder) {
  for (WireType wire : {WireType::kBFloat16, WireType::kFloat16}) {
    for (int n = 1; n <= 5; ++n) {
      SCOPED_TRACE(std::string(WireTypeName(wire)) + ", " + std::to_string(n) + " ranks");
      LoopbackRing ring(n);
      const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
        CommOptions options = ring.Options(rank);
        options.allreduce_algorithm = "ring";  // recursive doubling: tcp_doubling_test.cpp
        auto comm = ring.Join(options);
        return testing::ExerciseSixteenBitWire(comm.get(), wire);
      });
      ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
      for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result);
    }
  }
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

TEST(TcpCommunicatorTest, AnOperationWaitingOnAPeerSaysWhichAndForHowLong) {
  LoopbackRing ring(2);
  std::atomic<Communicator*> first{nullptr};
  std::string seen_late;
  std::string seen_early;
  std::string seen_after;
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    auto comm = ring.Join(rank);
    std::vector<float> data(1000, 1.0f);
    if (rank == 0) {
      comm->Barrier();
      first.store(comm.get());
      comm->AllReduce(data.data(), data.size());
      seen_after = comm->WaitingOn(0.0);
    } else {
      comm->Barrier();
      // Rank 0 waits in its allreduce for this one, which asks what it waits for meanwhile.
      while (first.load() == nullptr) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      seen_early = first.load()->WaitingOn(5.0);
      std::this_thread::sleep_for(std::chrono::milliseconds(1200));
      seen_late = first.load()->WaitingOn(1.0);
      comm->AllReduce(data.data(), data.size());
    }
    return std::string();
  });
  ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  EXPECT_EQ(seen_early, "");
  EXPECT_TRUE(std::regex_match(
      seen_late, std::regex(R"([12] s for data from rank 1 \(.+\) during allreduce)")))
      << seen_late;
  EXPECT_EQ(seen_after, "");
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
