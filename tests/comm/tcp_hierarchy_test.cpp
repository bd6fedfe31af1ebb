// SPDX-License-Identifier: Apache-2.0
// The tcp backend's AllReduce across hosts (CommOptions::hierarchical): "hosts" are loopback
// addresses 127.0.0.h, several ranks on each, placed in blocks or interleaved, of even and
// uneven sizes. Sums within float rounding of the exact ones (the order of the additions is not
// the flat ring's), every rank bit-identical, 16-bit wires, the flag that turns it off (then
// the flat ring's bits), and a killed rank (a host's first or another) ending every other rank
// within the timeout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/tcp_communicator.hpp"
#include "comm_test_ops.hpp"
#include "core/error.hpp"
#include "support/spawn_ranks.hpp"
#include "tcp_test_util.hpp"

namespace cortado::comm {
namespace {

using testing::AllOk;
using testing::Describe;
using testing::Digest;
using testing::LoopbackRing;

// Every rank's result of AllReduceAs over testing::Input for each count, checked against the sum
// in double within `tolerance` (relative to the sum of magnitudes); returns the ranks' digests.
std::vector<std::string> SumOn(const std::vector<int>& host, bool hierarchical, WireType wire,
                               double tolerance, std::vector<float>* rank0 = nullptr,
                               const std::string& algorithm = "auto") {
  LoopbackRing hosts(host);
  const int n = hosts.size();
  const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
    CommOptions options = hosts.Options(rank);
    options.hierarchical = hierarchical;
    options.allreduce_algorithm = algorithm;
    auto comm = hosts.Join(options);
    Digest digest;
    for (size_t count : {size_t{1}, size_t{13}, size_t{1001}, size_t{70001}}) {
      const auto seed = static_cast<uint32_t>(count + 5);
      std::vector<float> data = testing::Input(rank, count, seed);
      comm->AllReduceAs(data.data(), count, wire);
      std::vector<double> exact(count, 0.0), magnitude(count, 0.0);
      for (int q = 0; q < n; ++q) {
        const std::vector<float> in = testing::Input(q, count, seed);
        for (size_t i = 0; i < count; ++i) {
          exact[i] += in[i];
          magnitude[i] += std::fabs(in[i]);
        }
      }
      for (size_t i = 0; i < count; ++i) {
        if (!(std::fabs(data[i] - exact[i]) <= tolerance * magnitude[i])) {
          throw std::runtime_error("count " + std::to_string(count) + ", element " +
                                   std::to_string(i) + ": " + std::to_string(data[i]) + ", exact " +
                                   std::to_string(exact[i]));
        }
      }
      if (rank == 0 && rank0 != nullptr && count == 70001) *rank0 = data;
      digest.Add(data.data(), count * sizeof(float));
      // The ring's other operations still run over every rank.
      testing::CheckBroadcast(comm.get(), 333, n - 1, seed, &digest);
    }
    comm->Barrier();
    return digest.Hex();
  });
  EXPECT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  std::vector<std::string> digests;
  for (const auto& o : outcomes) digests.push_back(o.result);
  return digests;
}

void ExpectAllEqual(const std::vector<std::string>& digests) {
  for (size_t r = 1; r < digests.size(); ++r) {
    EXPECT_EQ(digests[r], digests[0]) << "rank " << r;
  }
}

// Float32: each of the N - 1 additions rounds once, a relative 2^-24 of partial sums bounded
// by the sum of magnitudes.
constexpr double kFloat32Tolerance = 8 * 5.97e-8;

TEST(TcpHierarchyTest, EightRanksOnFourHostsInBlocksAndInterleaved) {
  for (const std::vector<int>& host :
       {std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}, std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}}) {
    SCOPED_TRACE(::testing::PrintToString(host));
    ExpectAllEqual(SumOn(host, true, WireType::kFloat32, kFloat32Tolerance));
  }
}

TEST(TcpHierarchyTest, UnevenHostsAndHostsOfOneRank) {
  // Three hosts of 1, 2 and 3 ranks; two hosts of 1 and 4.
  for (const std::vector<int>& host :
       {std::vector<int>{0, 1, 1, 2, 2, 2}, std::vector<int>{0, 1, 1, 1, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(host));
    ExpectAllEqual(SumOn(host, true, WireType::kFloat32, kFloat32Tolerance));
  }
}

TEST(TcpHierarchyTest, SixteenBitWiresBetweenTheHosts) {
  // Only the hosts' ring rounds: two hosts here, one rounding of the sum plus the first
  // host's values (bfloat16: 2^-8 each; float16: 2^-11).
  ExpectAllEqual(SumOn({0, 0, 0, 1, 1, 1}, true, WireType::kBFloat16, 3 * 3.91e-3));
  ExpectAllEqual(SumOn({0, 0, 0, 1, 1, 1}, true, WireType::kFloat16, 3 * 4.89e-4));
}

TEST(TcpHierarchyTest, TurnedOffItIsTheFlatRing) {
  const std::vector<int> host = {0, 0, 1, 1};
  std::vector<float> flat_off, flat_one_host, tiered;
  // The ring throughout (recursive halving at 4 ranks adds in the hierarchy's order).
  SumOn(host, false, WireType::kFloat32, kFloat32Tolerance, &flat_off, "ring");
  SumOn({0, 0, 0, 0}, true, WireType::kFloat32, kFloat32Tolerance, &flat_one_host, "ring");
  SumOn(host, true, WireType::kFloat32, kFloat32Tolerance, &tiered, "ring");
  ASSERT_EQ(flat_off.size(), 70001u);
  // Off (or every rank on one host): the ring of every rank, bit for bit.
  EXPECT_EQ(flat_off, flat_one_host);
  // On: the same sums in another order; some differ in their last bits.
  ASSERT_EQ(tiered.size(), flat_off.size());
  size_t differ = 0;
  for (size_t i = 0; i < tiered.size(); ++i) differ += tiered[i] != flat_off[i];
  EXPECT_GT(differ, 0u);
}

TEST(TcpHierarchyTest, KilledRankFailsEveryOtherRankWithinTheTimeout) {
  constexpr double kTimeoutS = 5;
  // Rank 2 is host 1's first rank (it sums between the hosts); rank 3 is not.
  for (int killed : {2, 3}) {
    SCOPED_TRACE("rank " + std::to_string(killed) + " killed");
    LoopbackRing hosts({0, 0, 1, 1, 2, 2});
    const auto outcomes = testing::RunRanksAsProcesses(
        6,
        [&](int rank) {
          hosts.CloseOthers(rank);
          CommOptions options = hosts.Options(rank);
          options.timeout_s = kTimeoutS;
          auto comm = hosts.Join(options);
          return testing::AllReduceUntilFailure(comm.get(), killed, 20000);
        },
        /*timeout_s=*/40);
    const std::string name = "rank " + std::to_string(killed) + " (" + hosts.peers()[killed] + ")";
    EXPECT_EQ(testing::CheckKilledRankRun(outcomes, killed, kTimeoutS, name), "")
        << Describe(outcomes);
  }
}

}  // namespace
}  // namespace cortado::comm
