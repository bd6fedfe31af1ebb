// SPDX-License-Identifier: Apache-2.0
// Runs one function per rank, as threads of this process or as forked child processes (after
// Gloo's test spawner and MultiProcTest), and collects how each rank ended.
//
// The body returns a string (a result to compare across ranks, e.g. a checksum; may be empty)
// or throws. In a child process gtest assertions do not reach the parent: a body meant for
// processes reports failures by throwing.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace cortado::testing {

struct RankOutcome {
  bool ok = false;
  std::string result;             // what the body returned
  std::string error;              // what() of what it threw, or how its process ended
  std::optional<ErrorCode> code;  // when it threw a cortado::Error
  double seconds = 0;             // how long the body ran
};

// "rank 2: ok" or "rank 2: <error>", for assertion messages.
std::string Describe(const std::vector<RankOutcome>& outcomes);

using RankBody = std::function<std::string(int rank)>;

// Runs body(0) ... body(n - 1), each on its own thread, and waits for all of them.
std::vector<RankOutcome> RunRanksAsThreads(int n, const RankBody& body);

// Runs body(rank) in a forked child process per rank; a child reports its outcome through a
// pipe and _exit()s. Waits up to timeout_s for all of them, then SIGKILLs the ones left
// (their error says so). A child killed by a signal reports "killed by signal N". Call from a
// single-threaded moment of the test (no other threads running).
std::vector<RankOutcome> RunRanksAsProcesses(int n, const RankBody& body, double timeout_s);

}  // namespace cortado::testing
