// SPDX-License-Identifier: Apache-2.0
// The rank spawner of tests/support: outcomes of threads and of processes, including a process
// that dies by a signal and one that hangs past the timeout.
#include "support/spawn_ranks.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/error.hpp"

namespace cortado::testing {
namespace {

std::string Body(int rank) {
  if (rank == 1) throw std::runtime_error("plain failure");
  if (rank == 2) CORTADO_THROW(kTimeout, "rank {} timed out", rank);
  return "result " + std::to_string(rank);
}

void ExpectOutcomes(const std::vector<RankOutcome>& outcomes) {
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_TRUE(outcomes[0].ok);
  EXPECT_EQ(outcomes[0].result, "result 0");
  EXPECT_FALSE(outcomes[1].ok);
  EXPECT_EQ(outcomes[1].error, "plain failure");
  EXPECT_FALSE(outcomes[1].code.has_value());
  EXPECT_FALSE(outcomes[2].ok);
  EXPECT_EQ(outcomes[2].error, "rank 2 timed out");
  EXPECT_EQ(outcomes[2].code, ErrorCode::kTimeout);
}

TEST(SpawnRanksTest, ThreadsReportResultsAndErrors) { ExpectOutcomes(RunRanksAsThreads(3, Body)); }

TEST(SpawnRanksTest, ProcessesReportResultsAndErrors) {
  const auto outcomes = RunRanksAsProcesses(3, Body, 20);
  ExpectOutcomes(outcomes);
  // Each rank ran in a process of its own.
  const auto pids = RunRanksAsProcesses(
      2, [](int) { return std::to_string(::getpid()); }, 20);
  ASSERT_TRUE(pids[0].ok && pids[1].ok);
  EXPECT_NE(pids[0].result, pids[1].result);
  EXPECT_NE(pids[0].result, std::to_string(::getpid()));
}

TEST(SpawnRanksTest, KilledAndHungProcessesAreReported) {
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = RunRanksAsProcesses(
      3,
      [](int rank) {
        if (rank == 1) ::raise(SIGKILL);
        if (rank == 2) std::this_thread::sleep_for(std::chrono::seconds(60));
        return std::string("fine");
      },
      /*timeout_s=*/1);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(outcomes[0].ok);
  EXPECT_EQ(outcomes[1].error, "killed by signal 9");
  EXPECT_FALSE(outcomes[2].ok);
  EXPECT_NE(outcomes[2].error.find("timed out"), std::string::npos) << outcomes[2].error;
  EXPECT_LT(elapsed, 5);
}

}  // namespace
}  // namespace cortado::testing
