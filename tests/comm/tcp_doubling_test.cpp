// SPDX-License-Identifier: Apache-2.0
// The tcp backend's AllReduce by recursive doubling and by recursive halving then doubling
// (CommOptions::allreduce_algorithm): on 2 to 8 ranks, uneven sizes (down to fewer elements than
// ranks), float32 and 16-bit wires, every element exactly the sum in the order the algorithms
// add (folded ranks first, then one partner per level: the same tree for both; on a 16-bit wire
// halving rounds at each level), every rank bit-identical, and within float rounding of the ring's;
// the model's choice between the three; a killed rank ends every other rank within the timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/tcp_communicator.hpp"
#include "comm_test_ops.hpp"
#include "core/error.hpp"
#include "math/half_host.hpp"
#include "recursive_sums.hpp"
#include "support/spawn_ranks.hpp"
#include "tcp_test_util.hpp"

namespace cortado::comm {
namespace {

using testing::AllOk;
using testing::Describe;
using testing::Digest;
using testing::DoublingSum;
using testing::Expect;
using testing::HalvingSum16;
using testing::Inputs;
using testing::LoopbackRing;
using testing::RoundTo;

CommOptions WithAlgorithm(const LoopbackRing& ring, int rank, const std::string& algorithm) {
  CommOptions options = ring.Options(rank);
  options.allreduce_algorithm = algorithm;
  return options;
}

TEST(TcpDoublingTest, SumsInTheAlgorithmsOrderOnTwoToEightRanks) {
  const std::vector<size_t> counts = {1, 7, 1001, 30000};
  for (const char* algorithm : {"doubling", "halving"})
    for (int n = 2; n <= 8; ++n) {
      SCOPED_TRACE(std::string(algorithm) + ", " + std::to_string(n) + " ranks");
      LoopbackRing ring(n);
      const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
        auto comm = ring.Join(WithAlgorithm(ring, rank, algorithm));
        Digest digest;
        for (size_t count : counts) {
          const auto seed = static_cast<uint32_t>(count + 3);
          std::vector<float> data = testing::Input(rank, count, seed);
          comm->AllReduce(data.data(), count);
          const auto inputs = Inputs(n, count, seed);
          for (size_t i = 0; i < count; ++i) {
            const float want = DoublingSum(inputs, i);
            if (data[i] != want) {
              throw std::runtime_error("count " + std::to_string(count) + ", element " +
                                       std::to_string(i) + ": " + std::to_string(data[i]) +
                                       ", expected " + std::to_string(want));
            }
          }
          digest.Add(data.data(), count * sizeof(float));
          // Interleaved with the ring's operations on the same communicator.
          testing::CheckBroadcast(comm.get(), 1000, n - 1, seed, &digest);
        }
        return digest.Hex();
      });
      ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
      for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result) << "rank " << r;
    }
}

TEST(TcpDoublingTest, AgreesWithTheRingWithinFloatRounding) {
  constexpr int kRanks = 6;
  constexpr size_t kCount = 5003;
  std::vector<std::vector<float>> results(3);
  for (int a = 0; a < 3; ++a) {
    const std::string algorithm = a == 0 ? "ring" : a == 1 ? "doubling" : "halving";
    LoopbackRing ring(kRanks);
    const auto outcomes = testing::RunRanksAsThreads(kRanks, [&](int rank) {
      auto comm = ring.Join(WithAlgorithm(ring, rank, algorithm));
      std::vector<float> data = testing::Input(rank, kCount, 11);
      comm->AllReduce(data.data(), kCount);
      if (rank == 0) results[a] = data;
      return std::string();
    });
    ASSERT_TRUE(AllOk(outcomes)) << algorithm << ": " << Describe(outcomes);
  }
  const auto inputs = Inputs(kRanks, kCount, 11);
  int differ = 0;
  for (size_t i = 0; i < kCount; ++i) {
    double exact = 0;
    for (const auto& in : inputs) exact += in[i];
    // Each of the 5 additions rounds once: a relative 2^-24 of the partial sums, which are at most
    // the sum of the magnitudes.
    double magnitude = 0;
    for (const auto& in : inputs) magnitude += std::fabs(in[i]);
    const double bound = 5 * magnitude * std::ldexp(1.0, -24);
    EXPECT_LE(std::fabs(results[0][i] - exact), bound) << "ring, element " << i;
    EXPECT_LE(std::fabs(results[1][i] - exact), bound) << "doubling, element " << i;
    EXPECT_EQ(results[2][i], results[1][i]) << "halving against doubling, element " << i;
    differ += results[0][i] != results[1][i];
  }
  // The orders differ, so some sums differ in their last bits (a check that both ran).
  EXPECT_GT(differ, 0);
}

// Doubling (small buffers) sends float32 and rounds the sum once at the end; halving (large
// buffers) sends the wire's values, rounding at each level, within (log2 p + 1) roundings of
// the exact sum.
TEST(TcpDoublingTest, SixteenBitWiresOnDoublingAndHalving) {
  for (const char* algorithm : {"doubling", "halving"})
    for (WireType wire : {WireType::kBFloat16, WireType::kFloat16}) {
      for (int n : {3, 4, 5, 8}) {
        SCOPED_TRACE(std::string(algorithm) + ", " + WireTypeName(wire) + ", " + std::to_string(n) +
                     " ranks");
        const bool halving = std::string(algorithm) == "halving";
        int levels = 0;
        while ((2 << levels) <= n) ++levels;
        // A rounding to the wire type errs by at most half a unit in the last place: 2^-8 of the
        // value for bfloat16 (8 bits of precision), 2^-11 for float16 (11); the partial sums are
        // at most the sum of the magnitudes.
        const double unit = std::ldexp(1.0, wire == WireType::kBFloat16 ? -8 : -11);
        LoopbackRing ring(n);
        const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
          auto comm = ring.Join(WithAlgorithm(ring, rank, algorithm));
          Digest digest;
          for (size_t count : {size_t{1}, size_t{9}, size_t{4001}}) {
            const auto seed = static_cast<uint32_t>(count);
            std::vector<float> data = testing::Input(rank, count, seed);
            comm->AllReduceAs(data.data(), count, wire);
            const auto inputs = Inputs(n, count, seed);
            for (size_t i = 0; i < count; ++i) {
              const float want = halving ? HalvingSum16(inputs, count, i, wire)
                                         : RoundTo(wire, DoublingSum(inputs, i));
              double exact = 0, magnitude = 0;
              for (const auto& in : inputs) {
                exact += in[i];
                magnitude += std::fabs(in[i]);
              }
              const double bound = (halving ? levels + 1 : 1) * unit * magnitude +
                                   (n - 1) * magnitude * std::ldexp(1.0, -24);
              if (data[i] != want || std::fabs(data[i] - exact) > bound) {
                throw std::runtime_error("count " + std::to_string(count) + ", element " +
                                         std::to_string(i) + ": " + std::to_string(data[i]) +
                                         ", expected " + std::to_string(want) + " (exact sum " +
                                         std::to_string(exact) + ")");
              }
            }
            digest.Add(data.data(), count * sizeof(float));
          }
          return digest.Hex();
        });
        ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
        for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result);
      }
    }
}

TEST(TcpDoublingTest, AutoTakesTheAlgorithmTheModelSaysIsFastest) {
  CommOptions options;
  options.latency_bytes = 64 << 10;  // L
  options.doubling_max_bytes = 1 << 20;
  auto algorithm = [&](int n, size_t count, WireType wire = WireType::kFloat32) {
    options.world_size = n;
    return std::string(TcpAllReduceAlgorithm(options, count, wire));
  };
  EXPECT_EQ(algorithm(1, 10), "ring");  // nothing moves
  // Two ranks: one step of the whole buffer against the ring's two of half of it.
  EXPECT_EQ(algorithm(2, 1000), "doubling");
  EXPECT_EQ(algorithm(2, 1000000), "ring");  // above doubling_max_bytes; halving is the ring
  // Eight ranks: doubling 3 (L + b), halving 6 L + 1.2 * 1.75 b (its bytes cost 1.2 times the
  // ring's), ring 14 L + 1.75 b: doubling up to b = 3.33 L = 218,453 bytes (54,613 floats),
  // halving up to 22.86 L = 1,497,966 bytes (374,491 floats), the ring above.
  EXPECT_EQ(algorithm(8, 54000), "doubling");
  EXPECT_EQ(algorithm(8, 55000), "halving");
  EXPECT_EQ(algorithm(8, 370000), "halving");
  EXPECT_EQ(algorithm(8, 380000), "ring");
  // 512 ranks: halving's 18 steps against the ring's 1,022 win up to about 2,500 L (a 25 MiB
  // bucket with L = 32 KiB).
  options.latency_bytes = 32 << 10;
  EXPECT_EQ(algorithm(512, 25 << 18), "halving");
  options.latency_bytes = 64 << 10;
  // Five ranks fold one in (2 (L + b) more): doubling 4 L + 4 b, halving 6 L + 3.8 b, ring
  // 8 L + 1.6 b: doubling below 4 L / 2.4 = 109,226.7 bytes, the ring above.
  EXPECT_EQ(algorithm(5, 27000), "doubling");
  EXPECT_EQ(algorithm(5, 28000), "ring");
  // A 16-bit wire halves the ring's and halving's bytes (doubling sends float32): at eight
  // ranks halving 6 L + 1.2 * 1.75 * 2 c = 6 L + 4.2 c against the ring's 14 L + 3.5 c (c
  // values) is faster below c = 8 L / 0.7 = 748,982.9; doubling, 3 (L + 4 c), is faster than
  // halving below c = 3 L / 7.8 = 25,206.2.
  EXPECT_EQ(algorithm(8, 25000, WireType::kFloat16), "doubling");
  EXPECT_EQ(algorithm(8, 26000, WireType::kFloat16), "halving");
  EXPECT_EQ(algorithm(8, 740000, WireType::kFloat16), "halving");
  EXPECT_EQ(algorithm(8, 760000, WireType::kFloat16), "ring");
  // Never doubling above doubling_max_bytes; with latency_bytes 0 only the bytes count, and the
  // ring moves the fewest when folding would be needed.
  options.doubling_max_bytes = 4000;
  EXPECT_EQ(algorithm(64, 1001), "halving");
  EXPECT_EQ(algorithm(64, 1000), "doubling");
  options.latency_bytes = 0;
  EXPECT_EQ(algorithm(48, 1000), "ring");
  // Forced.
  options.allreduce_algorithm = "ring";
  options.latency_bytes = 1 << 30;
  EXPECT_EQ(algorithm(64, 1), "ring");
  options.allreduce_algorithm = "doubling";
  EXPECT_EQ(algorithm(3, size_t{1} << 28), "doubling");
  options.allreduce_algorithm = "halving";
  EXPECT_EQ(algorithm(6, 10), "halving");
  EXPECT_EQ(algorithm(2, 10), "ring");  // the same steps
  options.allreduce_algorithm = "tree";
  try {
    algorithm(4, 1);
    ADD_FAILURE() << "an unknown algorithm was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("must be ring, doubling, halving or auto, not 'tree'"),
              std::string::npos)
        << e.what();
  }
}

// Describe() says how AllReduce goes (the training log's "Connection:" line, Spark's included):
// the algorithm each communicator was built with, auto with its step cost, and the hierarchy of
// hosts where there is one.
TEST(TcpDoublingTest, DescribeSaysHowAllReduceGoes) {
  auto describe = [](const std::vector<int>& hosts, const std::string& algorithm,
                     size_t latency_bytes, bool hierarchical) {
    LoopbackRing ring(hosts);
    const auto outcomes = testing::RunRanksAsThreads(ring.size(), [&](int rank) {
      CommOptions options = WithAlgorithm(ring, rank, algorithm);
      options.latency_bytes = latency_bytes;
      options.hierarchical = hierarchical;
      auto comm = ring.Join(options);
      comm->Barrier();  // no rank closes its connections while another is still setting up
      return comm->Describe();
    });
    if (!AllOk(outcomes)) throw std::runtime_error(Describe(outcomes));
    return outcomes[0].result;
  };
  EXPECT_EQ(describe({0, 0}, "doubling", 32 << 10, true), "tcp: rank 0 of 2; allreduce: doubling");
  EXPECT_EQ(describe({0, 0, 0}, "ring", 32 << 10, true), "tcp: rank 0 of 3; allreduce: ring");
  EXPECT_EQ(describe({0, 0, 0}, "halving", 32 << 10, true), "tcp: rank 0 of 3; allreduce: halving");
  EXPECT_EQ(describe({0, 0}, "halving", 32 << 10, true),
            "tcp: rank 0 of 2; allreduce: ring (halving's steps on two ranks)");
  EXPECT_EQ(describe({0, 0, 0}, "auto", 32 << 10, true),
            "tcp: rank 0 of 3; allreduce: auto (a step costs 32 KB)");
  EXPECT_EQ(describe({0, 0}, "auto", 2560, true),
            "tcp: rank 0 of 2; allreduce: auto (a step costs 2.5 KB)");
  EXPECT_EQ(describe({0, 0, 1, 1}, "doubling", 32 << 10, true),
            "tcp: rank 0 of 4; allreduce: within each host by the ring, between the 2 hosts by "
            "doubling");
  EXPECT_EQ(describe({0, 0, 1, 1}, "doubling", 32 << 10, false),
            "tcp: rank 0 of 4; allreduce: doubling");
  // One rank moves nothing.
  EXPECT_EQ(describe({0}, "doubling", 32 << 10, true), "tcp: rank 0 of 1");
}

TEST(TcpDoublingTest, UnknownAlgorithmIsRefusedWhenBuilt) {
  LoopbackRing ring(3);
  CommOptions options = WithAlgorithm(ring, 0, "butterfly");
  try {
    ring.Join(options);
    ADD_FAILURE() << "built";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'butterfly'"), std::string::npos) << e.what();
  }
}

// The pairs listen in CommOptions' port range (a firewall's): a range whose only port is taken
// fails every rank's set-up, naming the range.
TEST(TcpDoublingTest, PairsListenInTheGivenPortRange) {
  auto taken = TcpListener::Open("127.0.0.1", 0);
  LoopbackRing ring(3);
  const auto outcomes = testing::RunRanksAsThreads(3, [&](int rank) {
    CommOptions options = WithAlgorithm(ring, rank, "auto");
    options.first_port = options.last_port = taken->port();
    try {
      ring.Join(options);
    } catch (const Error& e) {
      Expect(e.code() == ErrorCode::kComm, std::string("kComm, not ") + e.what());
      return std::string(e.what());
    }
    return std::string("built");
  });
  ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  const std::string range = std::to_string(taken->port()) + "-" + std::to_string(taken->port());
  // Every rank fails; a rank that had not finished the ring's set-up when a faster one failed
  // hears of it as that rank closing its connection.
  int named = 0;
  for (int r = 0; r < 3; ++r) {
    const std::string& message = outcomes[r].result;
    if (message.find("recursive doubling") != std::string::npos) {
      EXPECT_NE(message.find(range), std::string::npos) << message;
      ++named;
    } else {
      EXPECT_NE(message.find("closed the connection during set-up"), std::string::npos) << message;
    }
  }
  EXPECT_GE(named, 1) << Describe(outcomes);
}

// Rank 0 waits in a swap for rank 2 (folded into it): WaitingOn names rank 2 by its world rank
// and address, as for the ring.
TEST(TcpDoublingTest, ASwapWaitingOnAPartnerSaysWhich) {
  LoopbackRing ring(3);
  std::atomic<Communicator*> first{nullptr};
  std::string seen;
  const auto outcomes = testing::RunRanksAsThreads(3, [&](int rank) {
    auto comm = ring.Join(WithAlgorithm(ring, rank, "doubling"));
    std::vector<float> data(1000, 1.0f);
    comm->Barrier();
    if (rank == 0) first.store(comm.get());
    if (rank == 2) {
      while (first.load() == nullptr) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(1300));
      seen = first.load()->WaitingOn(1.0);
    }
    comm->AllReduce(data.data(), data.size());
    Expect(data[0] == 3.0f, "the sum of three ones");
    return std::string();
  });
  ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  EXPECT_TRUE(std::regex_match(seen, std::regex("[12] s for data from rank 2 \\(" +
                                                ring.peers()[2] + "\\) during allreduce")))
      << seen;
}

// A rank killed during allreduces by doubling (a partner at level 0 and 1, and a folded rank):
// every other rank fails within the timeout, and the rank that swaps with it names it.
TEST(TcpDoublingTest, KilledRankFailsEveryOtherRankWithinTheTimeout) {
  constexpr double kTimeoutS = 5;
  for (const char* algorithm : {"doubling", "halving"})
    for (int killed : {1, 4}) {
      SCOPED_TRACE(std::string(algorithm) + ", rank " + std::to_string(killed) + " killed");
      LoopbackRing ring(5);
      const auto outcomes = testing::RunRanksAsProcesses(
          5,
          [&](int rank) {
            ring.CloseOthers(rank);
            CommOptions options = WithAlgorithm(ring, rank, algorithm);
            options.timeout_s = kTimeoutS;
            auto comm = ring.Join(options);
            return testing::AllReduceUntilFailure(comm.get(), killed, 1000);
          },
          /*timeout_s=*/40);
      const std::string name = "rank " + std::to_string(killed) + " (" + ring.peers()[killed] + ")";
      EXPECT_EQ(testing::CheckKilledRankRun(outcomes, killed, kTimeoutS, name), "")
          << Describe(outcomes);
    }
}

}  // namespace
}  // namespace cortado::comm
