// SPDX-License-Identifier: Apache-2.0
// The tcp backend when things go wrong: bad options, peers of another job or attempt, a world
// of another size, a duplicated or misplaced rank, an unreachable, silent or killed peer, and
// Abort from another thread. Every error names the peer and the operation; a broken
// communicator rethrows its first error.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/socket.hpp"
#include "comm/tcp/tcp_communicator.hpp"
#include "comm_test_ops.hpp"
#include "core/error.hpp"
#include "support/spawn_ranks.hpp"
#include "tcp_test_util.hpp"

namespace cortado::comm {
namespace {

using testing::Describe;
using testing::LoopbackRing;
using testing::RankOutcome;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Whether `text` contains `part` (the message says what it is instead).
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' lacks '" << part << "'";
}

// Runs body; expects a cortado::Error of `code` and returns its message.
template <typename F>
std::string ErrorOf(F&& body, ErrorCode code) {
  try {
    body();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << ErrorCodeName(e.code()) << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

TEST(TcpSocketTest, ParsesHostPort) {
  const HostPort a = ParseHostPort("10.0.0.7:4000", 0);
  EXPECT_EQ(a.host, "10.0.0.7");
  EXPECT_EQ(a.port, 4000);
  EXPECT_EQ(a.ToString(), "10.0.0.7:4000");
  EXPECT_EQ(ParseHostPort("node-3.cluster:65535", 3).host, "node-3.cluster");
  for (const char* bad :
       {"nonsense", ":4000", "host:", "host:0", "host:65536", "host:4x", "host:-1", "::1:4000"}) {
    const std::string message =
        ErrorOf([&] { ParseHostPort(bad, 2); }, ErrorCode::kInvalidArgument);
    EXPECT_TRUE(Contains(message, std::string("peer 2 '") + bad + "'"));
  }
}

TEST(TcpSocketTest, ResolvesNamesAndRejectsUnknownOnes) {
  const sockaddr_in addr = ResolveIpv4(ParseHostPort("localhost:1234", 0), "peer 0");
  EXPECT_EQ(FormatSockaddr(addr), "127.0.0.1:1234");
  const std::string message =
      ErrorOf([] { ResolveIpv4(ParseHostPort("no-such-host.invalid:1", 4), "peer 4 'x'"); },
              ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(message, "no-such-host.invalid"));
}

TEST(TcpSocketTest, ListenerPicksAFreePortAndABusyPortFails) {
  auto listener = TcpListener::Open("127.0.0.1", 0);
  EXPECT_GT(listener->port(), 0);
  EXPECT_EQ(listener->host(), "127.0.0.1");
  const std::string message =
      ErrorOf([&] { TcpListener::Open("127.0.0.1", listener->port()); }, ErrorCode::kComm);
  EXPECT_TRUE(Contains(message, "cannot listen on 127.0.0.1:" + std::to_string(listener->port())));
  EXPECT_TRUE(Contains(message, "in use"));
  ErrorOf([] { TcpListener::Open("127.0.0.1", 70000); }, ErrorCode::kInvalidArgument);
}

TEST(TcpSocketTest, ListenerInARangeTakesItsFirstFreePort) {
  auto held = TcpListener::Open("127.0.0.1", 0);
  const int first = held->port();
  const int last = std::min(first + 20, 65535);
  ASSERT_LT(first, last) << "the ephemeral port was the last one";
  // The range's first port is taken: the listener takes a later one, within the range.
  auto listener = TcpListener::OpenInRange("127.0.0.1", first, last);
  EXPECT_GT(listener->port(), first);
  EXPECT_LE(listener->port(), last);
  // A second listener in the same range skips both.
  auto second = TcpListener::OpenInRange("127.0.0.1", first, last);
  EXPECT_NE(second->port(), listener->port());
  EXPECT_GT(second->port(), first);
  EXPECT_LE(second->port(), last);
  // A range whose every port is taken fails naming it.
  const std::string range = std::to_string(first) + "-" + std::to_string(first);
  EXPECT_TRUE(Contains(
      ErrorOf([&] { TcpListener::OpenInRange("127.0.0.1", first, first); }, ErrorCode::kComm),
      "cannot listen on 127.0.0.1: every port of " + range + " is in use"));
  // 0-0 is any free port.
  EXPECT_GT(TcpListener::OpenInRange("127.0.0.1", 0, 0)->port(), 0);
  for (const auto& [from, to] : std::vector<std::pair<int, int>>{{0, 10}, {20, 10}, {1, 65536}}) {
    EXPECT_TRUE(Contains(ErrorOf([&] { TcpListener::OpenInRange("127.0.0.1", from, to); },
                                 ErrorCode::kInvalidArgument),
                         "in the ports " + std::to_string(from) + "-" + std::to_string(to)));
  }
}

TEST(TcpSocketTest, ListenerBindsTheGivenAddressOnly) {
  auto listener = TcpListener::Open("127.0.0.1", 0);
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  ASSERT_EQ(::getsockname(listener->fd(), reinterpret_cast<sockaddr*>(&bound), &len), 0);
  EXPECT_EQ(FormatSockaddr(bound), "127.0.0.1:" + std::to_string(listener->port()));
  // 192.0.2.1 (TEST-NET-1) is nobody's address: bound, never connected to.
  const std::string message = ErrorOf([] { TcpListener::Open("192.0.2.1", 0); }, ErrorCode::kComm);
  EXPECT_TRUE(Contains(message,
                       "cannot listen on 192.0.2.1:0: 192.0.2.1 is not an address of "
                       "this machine; give one of this machine's own addresses"));
  EXPECT_TRUE(
      Contains(ErrorOf([] { TcpListener::Open("0.0.0.0", 0); }, ErrorCode::kInvalidArgument),
               "0.0.0.0 is every interface"));
}

TEST(TcpFaultTest, BadPeersAreRejectedNamingTheEntry) {
  CommOptions options;
  options.world_size = 3;
  options.rank = 0;
  options.peers = {"127.0.0.1:4000", "127.0.0.1:4001"};
  EXPECT_TRUE(Contains(ErrorOf([&] { CreateCommunicator(options); }, ErrorCode::kInvalidArgument),
                       "peers names 2 addresses but the world has 3 ranks"));
  options.peers = {"127.0.0.1:4000", "nonsense", "127.0.0.1:4002"};
  EXPECT_TRUE(Contains(ErrorOf([&] { CreateCommunicator(options); }, ErrorCode::kInvalidArgument),
                       "peer 1 'nonsense' is not host:port"));
  options.peers = {"127.0.0.1:4000", "127.0.0.1:4001", "127.0.0.1:99999"};
  EXPECT_TRUE(Contains(ErrorOf([&] { CreateCommunicator(options); }, ErrorCode::kInvalidArgument),
                       "peer 2 '127.0.0.1:99999'"));
}

TEST(TcpFaultTest, InvalidBroadcastRootDoesNotBreakTheCommunicator) {
  CommOptions options;
  auto comm = CreateCommunicator(options);
  ErrorOf([&] { comm->Broadcast(nullptr, 0, 1); }, ErrorCode::kInvalidArgument);
  comm->Barrier();
}

// Runs two ranks whose options differ as `change` says; both must fail set-up with kComm, the
// messages containing `rank0` and `rank1`.
void ExpectSetUpRefused(const std::function<void(int rank, CommOptions*)>& change,
                        const std::string& rank0, const std::string& rank1) {
  LoopbackRing ring(2);
  const auto start = Clock::now();
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    CommOptions options = ring.Options(rank);
    change(rank, &options);
    ring.Join(options);
    return std::string();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(outcomes[r].ok) << "rank " << r;
    EXPECT_EQ(outcomes[r].code, ErrorCode::kComm) << outcomes[r].error;
    EXPECT_TRUE(Contains(outcomes[r].error, r == 0 ? rank0 : rank1));
  }
  EXPECT_LT(SecondsSince(start), 5) << "a refusal should not wait for connect_timeout_s";
}

TEST(TcpFaultTest, PeerOfAnotherJobIsRefused) {
  ExpectSetUpRefused(
      [](int rank, CommOptions* o) {
        if (rank == 1) o->token = "another-job";
      },
      "belongs to another job (token mismatch)", "belongs to another job (token mismatch)");
}

TEST(TcpFaultTest, PeerOfAnotherAttemptIsRefused) {
  ExpectSetUpRefused(
      [](int rank, CommOptions* o) {
        if (rank == 1) o->attempt = 3;
      },
      "has attempt 3, rank 0 has 0", "attempt mismatch");
}

TEST(TcpFaultTest, PeerCountingAnotherWorldIsRefused) {
  // Rank 1 believes in a world of 3 (its next, "rank 2", is a listener nobody serves).
  auto extra = TcpListener::Open("127.0.0.1", 0);
  const std::string extra_peer = "127.0.0.1:" + std::to_string(extra->port());
  ExpectSetUpRefused(
      [&](int rank, CommOptions* o) {
        if (rank == 1) {
          o->world_size = 3;
          o->peers.push_back(extra_peer);
        }
      },
      "says the world has 3 ranks, rank 0 has 2", "says the world has 2 ranks, rank 1 has 3");
}

TEST(TcpFaultTest, DuplicatedRankIsRefused) {
  // Two processes both claim rank 0 of 3 and connect to rank 1; rank 2 never starts (rank 1's
  // connection waits in its listener's backlog), so rank 1 sees both claims.
  LoopbackRing ring(3);
  auto second = TcpListener::Open("127.0.0.1", 0);
  const auto outcomes = testing::RunRanksAsThreads(3, [&](int index) {
    CommOptions options = ring.Options(index == 1 ? 1 : 0);
    options.connect_timeout_s = 3;
    if (index == 2) {
      options.peers[0] = "127.0.0.1:" + std::to_string(second->port());
      CreateTcpCommunicator(options, std::move(second));
    } else {
      ring.Join(options);
    }
    return std::string();
  });
  ASSERT_FALSE(outcomes[1].ok);
  EXPECT_EQ(outcomes[1].code, ErrorCode::kComm) << outcomes[1].error;
  EXPECT_TRUE(Contains(outcomes[1].error, "duplicated rank 0"));
  // One claimant is refused, the other sees rank 1 leave; neither waits for the timeout.
  EXPECT_FALSE(outcomes[0].ok);
  EXPECT_FALSE(outcomes[2].ok);
  EXPECT_TRUE(
      outcomes[0].error.find("refused the connection: duplicated rank 0") != std::string::npos ||
      outcomes[2].error.find("refused the connection: duplicated rank 0") != std::string::npos)
      << Describe(outcomes);
}

TEST(TcpFaultTest, PeersListedInAnotherOrderAreRefused) {
  // Rank 0's list swaps ranks 1 and 2: it connects to rank 2 believing it is rank 1.
  LoopbackRing ring(3);
  const auto outcomes = testing::RunRanksAsThreads(3, [&](int rank) {
    CommOptions options = ring.Options(rank);
    options.connect_timeout_s = 1;
    if (rank == 0) std::swap(options.peers[1], options.peers[2]);
    ring.Join(options);
    return std::string();
  });
  ASSERT_FALSE(outcomes[2].ok);
  EXPECT_TRUE(Contains(outcomes[2].error,
                       "believes it connected to rank 1, but " + ring.peers()[2] + " is rank 2"));
  ASSERT_FALSE(outcomes[0].ok);
  EXPECT_TRUE(Contains(outcomes[0].error, "refused the connection"));
  EXPECT_FALSE(outcomes[1].ok);  // nobody connects to it: it times out
}

TEST(TcpFaultTest, UnreachablePeerTimesOutAfterConnectTimeout) {
  std::string dead_peer;
  {
    auto closed = TcpListener::Open("127.0.0.1", 0);
    dead_peer = "127.0.0.1:" + std::to_string(closed->port());
  }
  LoopbackRing ring(1);
  CommOptions options = ring.Options(0);
  options.world_size = 2;
  options.peers.push_back(dead_peer);
  options.connect_timeout_s = 1;
  const auto start = Clock::now();
  const std::string message = ErrorOf([&] { ring.Join(options); }, ErrorCode::kTimeout);
  const double elapsed = SecondsSince(start);
  EXPECT_TRUE(Contains(message, "rank 0 could not reach rank 1 at " + dead_peer +
                                    " within 1 s (last error: connection refused)"));
  EXPECT_GE(elapsed, 0.9);
  EXPECT_LT(elapsed, 3);
}

TEST(TcpFaultTest, SilentPeerTimesOutAndTheCommunicatorStaysBroken) {
  LoopbackRing ring(2);
  std::promise<void> rank0_done;
  std::shared_future<void> released = rank0_done.get_future().share();
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    CommOptions options = ring.Options(rank);
    options.timeout_s = 0.5;
    // The ring: by recursive doubling, rank 1 would still receive what rank 0 sent before it
    // gave up, and complete this call (Communicator's comment).
    options.allreduce_algorithm = "ring";
    auto comm = ring.Join(options);
    std::vector<float> data(1000, 1.0f);
    if (rank == 1) {
      released.wait();  // silent while rank 0 waits for it
      const std::string message =
          ErrorOf([&] { comm->AllReduce(data.data(), data.size()); }, ErrorCode::kComm);
      EXPECT_TRUE(Contains(
          message, "rank 0 (" + ring.peers()[0] + ") closed the connection during allreduce"));
      return std::string();
    }
    const auto start = Clock::now();
    const std::string message =
        ErrorOf([&] { comm->AllReduce(data.data(), data.size()); }, ErrorCode::kTimeout);
    const double elapsed = SecondsSince(start);
    rank0_done.set_value();
    EXPECT_EQ(message, "rank 1 (" + ring.peers()[1] + "): no data for 0.5 s during allreduce");
    EXPECT_GE(elapsed, 0.45);
    EXPECT_LT(elapsed, 2);
    // Broken: every later call throws the first error again, at once.
    EXPECT_EQ(ErrorOf([&] { comm->Barrier(); }, ErrorCode::kTimeout), message);
    EXPECT_EQ(ErrorOf([&] { comm->AllReduce(data.data(), 0); }, ErrorCode::kTimeout), message);
    return std::string();
  });
  EXPECT_TRUE(outcomes[0].ok && outcomes[1].ok) << Describe(outcomes);
}

TEST(TcpFaultTest, AbortFromAnotherThreadReleasesABlockedAllReduce) {
  LoopbackRing ring(2);
  std::promise<Communicator*> rank0;
  std::future<Communicator*> rank0_comm = rank0.get_future();
  std::promise<void> aborted;
  std::shared_future<void> aborted_done = aborted.get_future().share();
  Clock::time_point abort_time;
  double release_s = -1;
  std::thread aborter([&] {
    Communicator* comm = rank0_comm.get();
    // Give rank 0 time to block in AllReduce (if it has not yet, it throws on entry instead).
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    abort_time = Clock::now();
    comm->Abort("the driver gave up");
    comm->Abort("a second reason is ignored");
  });
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    CommOptions options = ring.Options(rank);
    options.timeout_s = 30;  // only Abort can end the call in time
    auto comm = ring.Join(options);
    std::vector<float> data(100000, 1.0f);
    if (rank == 1) {
      aborted_done.wait();
      const std::string message =
          ErrorOf([&] { comm->AllReduce(data.data(), data.size()); }, ErrorCode::kComm);
      EXPECT_TRUE(Contains(message, "rank 0 (" + ring.peers()[0] + ") closed the connection"));
      return std::string();
    }
    rank0.set_value(comm.get());
    const std::string message =
        ErrorOf([&] { comm->AllReduce(data.data(), data.size()); }, ErrorCode::kAborted);
    release_s = SecondsSince(abort_time);
    aborter.join();
    aborted.set_value();
    EXPECT_TRUE(Contains(message, "the driver gave up"));
    EXPECT_EQ(ErrorOf([&] { comm->AllGather("x"); }, ErrorCode::kAborted), message);
    EXPECT_EQ(ErrorOf([&] { comm->Barrier(); }, ErrorCode::kAborted), message);
    return std::string();
  });
  EXPECT_TRUE(outcomes[0].ok && outcomes[1].ok) << Describe(outcomes);
  EXPECT_GE(release_s, 0);
  EXPECT_LT(release_s, 1) << "AllReduce should end promptly after Abort";
}

TEST(TcpFaultTest, KilledPeerProcessFailsTheOthersWithinTheTimeout) {
  constexpr double kTimeoutS = 5;
  LoopbackRing ring(3);
  const auto outcomes = testing::RunRanksAsProcesses(
      3,
      [&](int rank) {
        ring.CloseOthers(rank);
        CommOptions options = ring.Options(rank);
        options.timeout_s = kTimeoutS;
        auto comm = ring.Join(options);
        return testing::AllReduceUntilFailure(comm.get(), /*killed=*/1, 50000);
      },
      /*timeout_s=*/30);
  EXPECT_FALSE(outcomes[1].ok);
  EXPECT_EQ(outcomes[1].error, "killed by signal 9");
  for (int r : {0, 2}) {
    ASSERT_TRUE(outcomes[r].ok) << Describe(outcomes);
    const std::string& report = outcomes[r].result;
    const testing::Failure failure = testing::ParseFailure(report);
    EXPECT_EQ(failure.code, static_cast<int>(ErrorCode::kComm)) << report;
    EXPECT_LT(failure.seconds, kTimeoutS + 1) << report;
    const std::string& message = failure.message;
    EXPECT_TRUE(Contains(message, "closed the connection during allreduce"));
    EXPECT_TRUE(Contains(message, "(127.0.0.1:"));
  }
  // The first to notice names rank 1; the other may hear of it from its neighbour instead.
  const std::string rank1 = "rank 1 (" + ring.peers()[1] + ")";
  EXPECT_TRUE(outcomes[0].result.find(rank1) != std::string::npos ||
              outcomes[2].result.find(rank1) != std::string::npos)
      << Describe(outcomes) << outcomes[0].result << "\n"
      << outcomes[2].result;
}

// Two ranks on two addresses share one connection both ways: a killed peer still fails the
// other within the timeout, naming it.
TEST(TcpFaultTest, KilledPeerOfTwoOnOneConnectionFailsTheOtherWithinTheTimeout) {
  constexpr double kTimeoutS = 5;
  LoopbackRing ring(2, /*own_addresses=*/true);
  const auto outcomes = testing::RunRanksAsProcesses(
      2,
      [&](int rank) {
        ring.CloseOthers(rank);
        CommOptions options = ring.Options(rank);
        options.timeout_s = kTimeoutS;
        auto comm = ring.Join(options);
        return testing::AllReduceUntilFailure(comm.get(), /*killed=*/1, 50000);
      },
      /*timeout_s=*/30);
  EXPECT_FALSE(outcomes[1].ok);
  EXPECT_EQ(outcomes[1].error, "killed by signal 9");
  ASSERT_TRUE(outcomes[0].ok) << Describe(outcomes);
  const testing::Failure failure = testing::ParseFailure(outcomes[0].result);
  EXPECT_EQ(failure.code, static_cast<int>(ErrorCode::kComm)) << outcomes[0].result;
  EXPECT_LT(failure.seconds, kTimeoutS + 1) << outcomes[0].result;
  EXPECT_TRUE(Contains(failure.message, "rank 1 (" + ring.peers()[1] + ")")) << failure.message;
  EXPECT_TRUE(Contains(failure.message, "during allreduce")) << failure.message;
}

}  // namespace
}  // namespace cortado::comm
