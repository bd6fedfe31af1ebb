// SPDX-License-Identifier: Apache-2.0
// The ucx backend: the communicator suite (every operation, results against sums in double, the
// ranks bit-identical) as threads and as processes over UCX's TCP and shared-memory transports,
// and its faults: a peer of another job, a silent peer, Abort, a killed peer process. With every
// rank on one host and UCX_TLS unset, UCX takes shared memory and the set-up connections are
// watched for lost peers.
#include "comm/ucx/ucx_communicator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "comm_test_ops.hpp"
#include "recursive_sums.hpp"
#include "support/scoped_env.hpp"
#include "support/spawn_ranks.hpp"
#include "tcp_test_util.hpp"

namespace cortado::comm {
namespace {

using testing::AllOk;
using testing::CheckAllReduce;
using testing::Describe;
using testing::Digest;
using testing::ExerciseAllOps;
using testing::LoopbackRing;
using Clock = std::chrono::steady_clock;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::unique_ptr<Communicator> JoinUcx(LoopbackRing* ring, const CommOptions& options) {
  CommOptions ucx = options;
  ucx.backend = "ucx";
  return ring->JoinWith(ucx, [](const CommOptions& o, std::unique_ptr<TcpListener> listener) {
    return CreateUcxCommunicator(o, std::move(listener));
  });
}

std::unique_ptr<Communicator> JoinUcx(LoopbackRing* ring, int rank) {
  return JoinUcx(ring, ring->Options(rank));
}

// Throws unless `comm` carries its data over a transport whose name contains one of `names`
// and none whose name contains `unwanted`.
void ExpectTransport(const Communicator& comm, const std::vector<std::string>& names,
                     const std::string& unwanted) {
  const std::string line = comm.Describe();
  const bool any = std::any_of(names.begin(), names.end(),
                               [&](const std::string& n) { return Contains(line, n); });
  testing::Expect(any && (unwanted.empty() || !Contains(line, unwanted)),
                  "unexpected transports: " + line);
}

TEST(UcxCommunicatorTest, IsRegisteredByName) {
  const auto backends = CommunicatorBackends();
  EXPECT_NE(std::find(backends.begin(), backends.end(), "ucx"), backends.end());
}

TEST(UcxCommunicatorTest, EveryOperationOnOneToFourRanksAsThreads) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE(std::to_string(n) + " ranks");
    LoopbackRing ring(n);
    const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
      auto comm = JoinUcx(&ring, rank);
      EXPECT_STREQ(comm->backend(), "ucx");
      EXPECT_EQ(comm->rank(), rank);
      EXPECT_EQ(comm->size(), n);
      EXPECT_TRUE(Contains(comm->Describe(), "ucx: rank " + std::to_string(rank)));
      return ExerciseAllOps(comm.get());
    });
    ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
    for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result) << "rank " << r;
  }
}

// The suite on 2 to 4 processes with UCX restricted to `tls`; each rank checks that its
// connections use one of `transports` and none named `unwanted`.
// An empty `tls` leaves UCX_TLS unset (UCX's own choice).
void EveryOperationAsProcesses(const std::string& tls, const std::vector<std::string>& transports,
                               const std::string& unwanted) {
  testing::ScopedEnv env("UCX_TLS", tls.empty() ? nullptr : tls.c_str());
  for (int n = 2; n <= 4; ++n) {
    SCOPED_TRACE(std::to_string(n) + " processes, UCX_TLS=" + tls);
    LoopbackRing ring(n);
    const auto outcomes = testing::RunRanksAsProcesses(
        n,
        [&](int rank) {
          ring.CloseOthers(rank);
          auto comm = JoinUcx(&ring, rank);
          ExpectTransport(*comm, transports, unwanted);
          return ExerciseAllOps(comm.get());
        },
        /*timeout_s=*/90);
    ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
    for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result) << "rank " << r;
  }
}

TEST(UcxCommunicatorTest, EveryOperationAsProcessesOverTcp) {
  EveryOperationAsProcesses("tcp", {"tcp/"}, "");
}

TEST(UcxCommunicatorTest, EveryOperationAsProcessesOverSharedMemory) {
  // UCX 1.13's "sm" is its shared-memory transports (posix, sysv, cma, ...), "self" a rank's
  // own loopback.
  EveryOperationAsProcesses("sm,self", {"posix/", "sysv/", "cma/", "xpmem/", "knem/"}, "tcp/");
}

// Every rank on one host with UCX_TLS unset: shared memory, the set-up connections watched for
// lost peers (the description says so), no TCP.
TEST(UcxCommunicatorTest, RanksOfOneHostTakeSharedMemoryWhenUcxChooses) {
  EveryOperationAsProcesses("", {"posix/", "sysv/", "cma/", "xpmem/", "knem/"}, "tcp/");
  testing::ScopedEnv env("UCX_TLS", nullptr);
  LoopbackRing ring(2);
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    auto comm = JoinUcx(&ring, rank);
    testing::Expect(Contains(comm->Describe(), "the set-up connections are watched"),
                    "description: " + comm->Describe());
    return ExerciseAllOps(comm.get());
  });
  ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  EXPECT_EQ(outcomes[1].result, outcomes[0].result);
}

TEST(UcxCommunicatorTest, ChunkSizesThatAreNoWholeNumberOfFloatsSumCorrectly) {
  for (size_t chunk : {size_t{4}, size_t{10}, size_t{4097}}) {
    SCOPED_TRACE("chunk_bytes " + std::to_string(chunk));
    LoopbackRing ring(3);
    const auto outcomes = testing::RunRanksAsThreads(3, [&](int rank) {
      CommOptions options = ring.Options(rank);
      options.chunk_bytes = chunk;
      auto comm = JoinUcx(&ring, options);
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

// AllReduceAs in bfloat16 and float16: the tcp ring's order and roundings (its test's
// reference), bit for bit, through staging slots whatever the transport, with chunks that cut
// the segments; float32 right after is exact again.
TEST(UcxCommunicatorTest, AllReduceOnASixteenBitWireSumsInTheRingsOrder) {
  for (WireType wire : {WireType::kBFloat16, WireType::kFloat16}) {
    for (int n = 1; n <= 4; ++n) {
      SCOPED_TRACE(std::string(WireTypeName(wire)) + ", " + std::to_string(n) + " ranks");
      LoopbackRing ring(n);
      const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
        CommOptions options = ring.Options(rank);
        options.chunk_bytes = 4096;
        options.allreduce_algorithm = "ring";  // doubling and halving: below
        auto comm = JoinUcx(&ring, options);
        return testing::ExerciseSixteenBitWire(comm.get(), wire);
      });
      ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
      for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result);
    }
  }
}

// The same as processes over UCX's TCP transport, where float32 sums go through RangeSum: the
// 16-bit wire still takes the staging slots.
TEST(UcxCommunicatorTest, SixteenBitWireAsProcessesOverTcp) {
  testing::ScopedEnv tls("UCX_TLS", "tcp");
  const int n = 3;
  LoopbackRing ring(n);
  const auto outcomes = testing::RunRanksAsProcesses(
      n,
      [&](int rank) {
        ring.CloseOthers(rank);
        CommOptions options = ring.Options(rank);
        options.allreduce_algorithm = "ring";
        auto comm = JoinUcx(&ring, options);
        Digest digest;
        for (WireType wire : {WireType::kBFloat16, WireType::kFloat16}) {
          for (size_t count : {size_t{7}, size_t{1001}, size_t{100000}}) {
            testing::CheckAllReduceOnTheWire(comm.get(), count, wire, &digest);
          }
        }
        return digest.Hex();
      },
      /*timeout_s=*/60);
  ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result);
}

// Over TCP the summing receives add each range UCX unpacks straight into place (RangeSum). With
// segments of an odd number of bytes, UCX's ranges split floats between them.
TEST(UcxCommunicatorTest, SegmentsThatSplitFloatsSumCorrectlyOverTcp) {
  testing::ScopedEnv tx("UCX_TCP_TX_SEG_SIZE", "1027");
  testing::ScopedEnv rx("UCX_TCP_RX_SEG_SIZE", "1027");
  EveryOperationAsProcesses("tcp", {"tcp/"}, "");
}

// Recursive doubling and halving (CommOptions::allreduce_algorithm) on one rank's part: float32
// AllReduce of 1, 7, 1001 and 30000 values, every element exactly as the algorithms add
// (DoublingSum: the tcp backend's reference), each followed by a ring Broadcast on the same
// communicator, then 16-bit wires of 9 and 4001 values (doubling rounds the float32 sum once,
// halving at each level: HalvingSum16; on two ranks halving is the ring). The digest of the
// results.
std::string ExerciseRecursive(Communicator* comm, const std::string& algorithm) {
  const int n = comm->size();
  Digest digest;
  auto check = [&](const std::vector<float>& data, size_t count, const std::string& what,
                   auto&& want) {
    for (size_t i = 0; i < count; ++i) {
      testing::Expect(data[i] == want(i), what + ", count " + std::to_string(count) + ", element " +
                                              std::to_string(i) + ": " + std::to_string(data[i]) +
                                              ", expected " + std::to_string(want(i)));
    }
    digest.Add(data.data(), count * sizeof(float));
  };
  for (size_t count : {size_t{1}, size_t{7}, size_t{1001}, size_t{30000}}) {
    const auto seed = static_cast<uint32_t>(count + 3);
    std::vector<float> data = testing::Input(comm->rank(), count, seed);
    comm->AllReduce(data.data(), count);
    const auto inputs = testing::Inputs(n, count, seed);
    check(data, count, "float32", [&](size_t i) { return testing::DoublingSum(inputs, i); });
    testing::CheckBroadcast(comm, 1000, n - 1, seed, &digest);
  }
  for (WireType wire : {WireType::kBFloat16, WireType::kFloat16}) {
    for (size_t count : {size_t{9}, size_t{4001}}) {
      const auto seed = static_cast<uint32_t>(count);
      std::vector<float> data = testing::Input(comm->rank(), count, seed);
      comm->AllReduceAs(data.data(), count, wire);
      const auto inputs = testing::Inputs(n, count, seed);
      check(data, count, WireTypeName(wire), [&](size_t i) {
        if (algorithm == "doubling") return testing::RoundTo(wire, testing::DoublingSum(inputs, i));
        // Halving on two ranks is the ring's steps, and so is its rounding.
        return n == 2 ? testing::RingSumOnTheWire(inputs, count, i, wire)
                      : testing::HalvingSum16(inputs, count, i, wire);
      });
    }
  }
  return digest.Hex();
}

// As threads, 2 to 8 ranks, pieces of 4 KiB (a level's transfer in several): the tcp backend's
// sums bit for bit, every rank the same; the description names the algorithm and the partners.
TEST(UcxCommunicatorTest, DoublingAndHalvingSumInTheAlgorithmsOrderAsThreads) {
  for (const char* algorithm : {"doubling", "halving"}) {
    for (int n : {2, 3, 4, 5, 8}) {
      SCOPED_TRACE(std::string(algorithm) + ", " + std::to_string(n) + " ranks");
      LoopbackRing ring(n);
      const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
        CommOptions options = ring.Options(rank);
        options.chunk_bytes = 4096;
        options.allreduce_algorithm = algorithm;
        auto comm = JoinUcx(&ring, options);
        if (n > 2) {
          testing::Expect(
              Contains(comm->Describe(), "; allreduce: " + std::string(algorithm) + " (partners "),
              comm->Describe());
        }
        return ExerciseRecursive(comm.get(), algorithm);
      });
      ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
      for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result) << "rank " << r;
    }
  }
}

// As 6 processes (a fold: ranks 4 and 5 past the power of two) over UCX's TCP transport, where
// float32 sums go through RangeSum, and over shared memory.
TEST(UcxCommunicatorTest, DoublingAndHalvingAsProcesses) {
  for (const char* tls : {"tcp", "sm,self"}) {
    testing::ScopedEnv env("UCX_TLS", tls);
    for (const char* algorithm : {"doubling", "halving"}) {
      SCOPED_TRACE(std::string(algorithm) + ", UCX_TLS=" + tls);
      const int n = 6;
      LoopbackRing ring(n);
      const auto outcomes = testing::RunRanksAsProcesses(
          n,
          [&](int rank) {
            ring.CloseOthers(rank);
            CommOptions options = ring.Options(rank);
            options.allreduce_algorithm = algorithm;
            auto comm = JoinUcx(&ring, options);
            return ExerciseRecursive(comm.get(), algorithm);
          },
          /*timeout_s=*/90);
      ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
      for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result) << "rank " << r;
    }
  }
}

// auto: doubling for a small buffer, the ring for a large one on 4 ranks with a step cost of
// 64 KiB (as tcp_doubling_test's AutoTakes... works out): results equal to those references.
TEST(UcxCommunicatorTest, AutoTakesDoublingForSmallBuffersAndTheRingForLarge) {
  const int n = 4;
  LoopbackRing ring(n);
  const auto outcomes = testing::RunRanksAsThreads(n, [&](int rank) {
    CommOptions options = ring.Options(rank);
    options.latency_bytes = 64 << 10;
    auto comm = JoinUcx(&ring, options);
    testing::Expect(Contains(comm->Describe(), "allreduce: auto (a step costs 64 KB)"),
                    comm->Describe());
    // Doubling below 8 L = 512 KiB of float32 (2 (L + b) against 6 L + 1.5 b), the ring above.
    Digest digest;
    for (size_t count : {size_t{1000}, size_t{400000}}) {
      const auto seed = static_cast<uint32_t>(count);
      std::vector<float> data = testing::Input(rank, count, seed);
      comm->AllReduce(data.data(), count);
      const auto inputs = testing::Inputs(n, count, seed);
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        if (count == 1000) {
          want = testing::DoublingSum(inputs, i);
        } else {
          // The ring: segment j's first rank j, then j + 1, ... add in turn.
          const RingSegments segments(count, n);
          int j = 0;
          while (i >= segments.begin(j) + segments.size(j)) ++j;
          want = inputs[j][i];
          for (int k = 1; k < n; ++k) want += inputs[(j + k) % n][i];
        }
        testing::Expect(data[i] == want, "count " + std::to_string(count) + ", element " +
                                             std::to_string(i) + ": " + std::to_string(data[i]) +
                                             ", expected " + std::to_string(want));
      }
      digest.Add(data.data(), count * sizeof(float));
    }
    return digest.Hex();
  });
  ASSERT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  for (int r = 1; r < n; ++r) EXPECT_EQ(outcomes[r].result, outcomes[0].result) << "rank " << r;
}

TEST(RangeSumTest, AddsEveryFloatOnceHoweverTheRangesFall) {
  std::mt19937 random(5);
  std::uniform_real_distribution<float> value(-100.0f, 100.0f);
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
    SCOPED_TRACE(std::to_string(count) + " floats");
    std::vector<float> dst(count);
    std::vector<float> src(count);
    for (size_t i = 0; i < count; ++i) {
      dst[i] = value(random);
      src[i] = value(random);
    }
    std::vector<float> expected(count);
    for (size_t i = 0; i < count; ++i) expected[i] = dst[i] + src[i];
    // Ranges of 1 to 13 bytes, most of them splitting floats, added in a shuffled order.
    const size_t bytes = count * sizeof(float);
    std::vector<std::pair<size_t, size_t>> ranges;
    for (size_t at = 0; at < bytes;) {
      const size_t length = std::min<size_t>(1 + random() % 13, bytes - at);
      ranges.emplace_back(at, length);
      at += length;
    }
    std::shuffle(ranges.begin(), ranges.end(), random);
    RangeSum sum;
    sum.Reset(dst.data(), bytes);
    EXPECT_EQ(sum.bytes(), bytes);
    const auto* raw = reinterpret_cast<const uint8_t*>(src.data());
    for (const auto& [at, length] : ranges) ASSERT_TRUE(sum.Add(at, raw + at, length));
    EXPECT_EQ(sum.pending(), 0u);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(dst[i], expected[i]) << "float " << i;
    // Ranges outside the buffer are refused and add nothing.
    const std::vector<float> before = dst;
    EXPECT_FALSE(sum.Add(bytes, raw, 1));
    EXPECT_FALSE(sum.Add(bytes + 1, raw, 0));
    EXPECT_EQ(dst, before);
  }
}

TEST(UcxFaultTest, PeerOfAnotherJobIsRefusedAtSetUp) {
  LoopbackRing ring(2);
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    CommOptions options = ring.Options(rank);
    if (rank == 1) options.token = "another job";
    options.connect_timeout_s = 5;
    auto comm = JoinUcx(&ring, options);
    return std::string();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(outcomes[r].ok) << Describe(outcomes);
    EXPECT_EQ(outcomes[r].code, ErrorCode::kComm) << Describe(outcomes);
    EXPECT_TRUE(Contains(outcomes[r].error, "another job")) << outcomes[r].error;
  }
}

TEST(UcxFaultTest, SilentPeerTimesOutNamingItAndTheCommunicatorStaysBroken) {
  LoopbackRing ring(2);
  std::promise<void> rank0_done;
  std::shared_future<void> released = rank0_done.get_future().share();
  std::once_flag release_once;
  const auto release = [&] { std::call_once(release_once, [&] { rank0_done.set_value(); }); };
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    CommOptions options = ring.Options(rank);
    options.timeout_s = 0.5;
    // Rank 1 waits for rank 0 however rank 0 ends, a failed set-up included.
    const std::shared_ptr<void> on_exit(nullptr, [&](void*) {
      if (rank == 0) release();
    });
    auto comm = JoinUcx(&ring, options);
    std::vector<float> data(1000, 1.0f);
    if (rank == 1) {
      released.wait();  // silent while rank 0 waits for it
      return std::string();
    }
    const auto start = Clock::now();
    std::string message;
    try {
      comm->AllReduce(data.data(), data.size());
      message = "no error";
    } catch (const Error& e) {
      testing::Expect(e.code() == ErrorCode::kTimeout, std::string("not a timeout: ") + e.what());
      message = e.what();
    }
    const double elapsed = SecondsSince(start);
    release();
    testing::Expect(message ==
                        "ucx rank 0: no data from rank 1 (127.0.0.1) for 0.5 s during "
                        "allreduce",
                    "message: " + message);
    testing::Expect(elapsed >= 0.45 && elapsed < 2, "took " + std::to_string(elapsed) + " s");
    // Broken: every later call throws the first error again, at once.
    try {
      comm->Barrier();
      testing::Expect(false, "a broken communicator ran a barrier");
    } catch (const Error& e) {
      testing::Expect(e.what() == message, std::string("later error: ") + e.what());
    }
    return std::string();
  });
  EXPECT_TRUE(AllOk(outcomes)) << Describe(outcomes);
}

// Rank 1's AllReduce after rank 0 was aborted (its connections closed): fails within 5 s with
// kComm naming rank 0; throws otherwise.
std::string AllReduceFailsNamingRankZero(Communicator* comm, std::vector<float>* data) {
  const auto start = Clock::now();
  try {
    comm->AllReduce(data->data(), data->size());
    testing::Expect(false, "rank 1's allreduce succeeded");
  } catch (const Error& e) {
    testing::Expect(e.code() == ErrorCode::kComm && Contains(e.what(), "rank 0 (127.0.0.1)"),
                    std::string("rank 1: ") + e.what());
  }
  testing::Expect(SecondsSince(start) < 5,
                  "rank 1 took " + std::to_string(SecondsSince(start)) + " s");
  return "";
}

TEST(UcxFaultTest, AbortFromAnotherThreadReleasesABlockedAllReduceAndThePeer) {
  LoopbackRing ring(2);
  std::promise<Communicator*> rank0;
  std::future<Communicator*> rank0_comm = rank0.get_future();
  std::promise<void> aborted;
  std::shared_future<void> aborted_done = aborted.get_future().share();
  Clock::time_point abort_time;
  double release_s = -1;
  std::thread aborter([&] {
    Communicator* comm = rank0_comm.get();
    if (comm == nullptr) return;  // rank 0 failed to join (its outcome says why)
    // Give rank 0 time to block in AllReduce (if it has not yet, it throws on entry instead).
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    abort_time = Clock::now();
    comm->Abort("the driver gave up");
    comm->Abort("a second reason is ignored");
  });
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    CommOptions options = ring.Options(rank);
    options.timeout_s = 30;  // only Abort can end the calls in time
    std::unique_ptr<Communicator> comm;
    try {
      comm = JoinUcx(&ring, options);
    } catch (...) {
      if (rank == 0) {
        rank0.set_value(nullptr);
        aborted.set_value();
      }
      throw;
    }
    std::vector<float> data(100000, 1.0f);
    if (rank == 1) {
      testing::Expect(aborted_done.wait_for(std::chrono::seconds(20)) == std::future_status::ready,
                      "rank 0 was never aborted");
      // Rank 0 closed its connections when aborted: this call fails at once, naming it.
      return AllReduceFailsNamingRankZero(comm.get(), &data);
    }
    rank0.set_value(comm.get());
    try {
      comm->AllReduce(data.data(), data.size());
      aborter.join();
      aborted.set_value();
      testing::Expect(false, "rank 0's allreduce succeeded");
    } catch (const Error& e) {
      release_s = SecondsSince(abort_time);
      aborter.join();
      aborted.set_value();
      testing::Expect(e.code() == ErrorCode::kAborted && Contains(e.what(), "the driver gave up"),
                      std::string("rank 0: ") + e.what());
    }
    return std::string();
  });
  if (aborter.joinable()) aborter.join();
  EXPECT_TRUE(AllOk(outcomes)) << Describe(outcomes);
  EXPECT_GE(release_s, 0);
  EXPECT_LT(release_s, 1) << "AllReduce should end promptly after Abort";
}

TEST(UcxFaultTest, AbortBetweenOperationsEndsTheNextCallHereAndThePeersAtOnce) {
  LoopbackRing ring(2);
  std::promise<void> aborted;
  std::shared_future<void> aborted_done = aborted.get_future().share();
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    CommOptions options = ring.Options(rank);
    options.timeout_s = 30;  // only the closed connection can end rank 1's call in time
    auto comm = JoinUcx(&ring, options);
    std::vector<float> data(1000, 1.0f);
    comm->AllReduce(data.data(), data.size());
    if (rank == 0) {
      comm->Abort("stopped between iterations");  // no call in progress
      aborted.set_value();
      try {
        comm->Barrier();
        testing::Expect(false, "rank 0's barrier succeeded after Abort");
      } catch (const Error& e) {
        testing::Expect(
            e.code() == ErrorCode::kAborted && Contains(e.what(), "stopped between iterations"),
            std::string("rank 0: ") + e.what());
      }
      return std::string();
    }
    aborted_done.wait();
    return AllReduceFailsNamingRankZero(comm.get(), &data);
  });
  EXPECT_TRUE(AllOk(outcomes)) << Describe(outcomes);
}

// Rank 1 of 3 SIGKILLs itself in its fourth allreduce: ranks 0 and 2 fail within `within_s`
// (the timeout is `timeout_s`), and the first to notice names rank 1. Over TCP UCX reports the
// closed connection at once; shared memory reports nothing, and the set-up connections, which
// the killed process's end closes, are watched instead. A null `tls` leaves UCX_TLS unset.
void KilledPeerProcessFailsTheOthers(const char* tls, double timeout_s, double within_s,
                                     const char* message) {
  testing::ScopedEnv env("UCX_TLS", tls);
  LoopbackRing ring(3);
  const auto outcomes = testing::RunRanksAsProcesses(
      3,
      [&](int rank) {
        ring.CloseOthers(rank);
        CommOptions options = ring.Options(rank);
        options.timeout_s = timeout_s;
        auto comm = JoinUcx(&ring, options);
        return testing::AllReduceUntilFailure(comm.get(), /*killed=*/1, 50000);
      },
      /*timeout_s=*/60);
  EXPECT_EQ(outcomes[1].error, "killed by signal 9");
  for (int r : {0, 2}) {
    ASSERT_TRUE(outcomes[r].ok) << Describe(outcomes);
    const testing::Failure failure = testing::ParseFailure(outcomes[r].result);
    EXPECT_LT(failure.seconds, within_s) << outcomes[r].result;
    EXPECT_TRUE(Contains(failure.message, "during allreduce")) << outcomes[r].result;
  }
  EXPECT_TRUE(Contains(outcomes[0].result, message) || Contains(outcomes[2].result, message))
      << outcomes[0].result << "\n"
      << outcomes[2].result;
  // The first to notice names rank 1; the other may hear of it from its neighbour instead.
  const std::string rank1 = "rank 1 (127.0.0.1)";
  EXPECT_TRUE(Contains(outcomes[0].result, rank1) || Contains(outcomes[2].result, rank1))
      << outcomes[0].result << "\n"
      << outcomes[2].result;
}

TEST(UcxFaultTest, KilledPeerProcessFailsTheOthersWithinTheTimeoutOverTcp) {
  KilledPeerProcessFailsTheOthers("tcp", 5, 6, "failed during allreduce");
}

// A 30 s timeout: only the watched set-up connections can end the calls within 5 s.
TEST(UcxFaultTest, KilledPeerProcessFailsTheOthersAtOnceOverSharedMemory) {
  KilledPeerProcessFailsTheOthers("sm,self", 30, 5, "rank 1 (127.0.0.1) is gone");
}

// Halving on 4 processes, rank 1 SIGKILLing itself in its fourth allreduce: ranks 0, 2 and 3
// fail within `within_s` during an allreduce. Rank 3's partners are 2 and 1 and its ring
// neighbours 2 and 0: over shared memory it waits on a partner whose connection nobody watches,
// and learns of the loss from its neighbours' set-up connections, which they close on failing.
void KilledPeerFailsHalving(const char* tls, double timeout_s, double within_s) {
  testing::ScopedEnv env("UCX_TLS", tls);
  const int n = 4;
  LoopbackRing ring(n);
  const auto outcomes = testing::RunRanksAsProcesses(
      n,
      [&](int rank) {
        ring.CloseOthers(rank);
        CommOptions options = ring.Options(rank);
        options.timeout_s = timeout_s;
        options.allreduce_algorithm = "halving";
        auto comm = JoinUcx(&ring, options);
        return testing::AllReduceUntilFailure(comm.get(), /*killed=*/1, 50000);
      },
      /*timeout_s=*/60);
  EXPECT_EQ(outcomes[1].error, "killed by signal 9");
  for (int r : {0, 2, 3}) {
    ASSERT_TRUE(outcomes[r].ok) << Describe(outcomes);
    const testing::Failure failure = testing::ParseFailure(outcomes[r].result);
    EXPECT_LT(failure.seconds, within_s) << "rank " << r << ": " << outcomes[r].result;
    EXPECT_TRUE(Contains(failure.message, "during allreduce")) << outcomes[r].result;
  }
}

TEST(UcxFaultTest, KilledPeerFailsHalvingWithinTheTimeoutOverTcp) {
  KilledPeerFailsHalving("tcp", 5, 6);
}

// A 30 s timeout: only the watched set-up connections can end the calls within 5 s.
TEST(UcxFaultTest, KilledPeerFailsHalvingAtOnceOverSharedMemory) {
  KilledPeerFailsHalving("sm,self", 30, 5);
}

TEST(UcxFaultTest, KilledPeerProcessFailsTheOthersAtOnceOnOneHostWhenUcxChooses) {
  KilledPeerProcessFailsTheOthers(nullptr, 30, 5, "rank 1 (127.0.0.1) is gone");
}

}  // namespace
}  // namespace cortado::comm
