// SPDX-License-Identifier: Apache-2.0
// `cortado train` as ranks of one job: separate processes over the tcp ring (--world, --rank,
// --peers) and under a real mpirun; rank 0 alone logs and snapshots; a killed rank ends the
// others within the collective timeout; the flags' errors.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.hpp"
#include "comm/communicator.hpp"
#include "core/config.hpp"
#include "solvers/tiny_problem.hpp"
#include "support/loopback_ports.hpp"

namespace cortado {
namespace {

using cli_testing::CliResult;
using cli_testing::RunCli;
using solver_testing::TempDir;

// A solver on a net with a DummyData layer of batch 4; snapshots every `snapshot` iterations.
std::string WriteSolver(const TempDir& dir, int max_iter, int snapshot) {
  std::ofstream(dir / "net.prototxt")
      << "name: 'dist'\n"
         "layer { name: 'data' type: 'DummyData' top: 'x' top: 't'\n"
         "  dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }\n"
         "                     data_filler { type: 'gaussian' std: 1 } } }\n"
         "layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y'\n"
         "  inner_product_param { num_output: 2 weight_filler { type: 'gaussian' std: 0.5 } } }\n"
         "layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }\n";
  std::ofstream(dir / "solver.prototxt")
      << "net: '" << (dir / "net.prototxt") << "'\n"
      << "base_lr: 0.01 lr_policy: 'fixed' momentum: 0.9 display: 1 solver_mode: CPU\n"
      << "max_iter: " << max_iter << " snapshot: " << snapshot << "\n"
      << "snapshot_prefix: '" << (dir / "snap") << "' random_seed: 3\n";
  return dir / "solver.prototxt";
}

// Runs one `cortado train` per rank over the tcp ring; extra[r] are rank r's extra arguments.
std::vector<CliResult> RunRanks(const std::string& solver, int world,
                                const std::vector<std::string>& extra = {},
                                std::function<bool(int, const std::string&, pid_t)> watch = {}) {
  const std::string peers = testing::JoinPeers(testing::LoopbackPeers(world));
  std::vector<std::future<CliResult>> runs;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {"train",
                                     "--solver=" + solver,
                                     "--world=" + std::to_string(world),
                                     "--rank=" + std::to_string(r),
                                     "--peers=" + peers,
                                     "--threads=1"};
    for (const auto& e : extra) args.push_back(e);
    std::function<bool(const std::string&, pid_t)> on_output;
    if (watch)
      on_output = [watch, r](const std::string& out, pid_t pid) { return watch(r, out, pid); };
    runs.push_back(
        std::async(std::launch::async, [args, on_output] { return RunCli(args, on_output); }));
  }
  std::vector<CliResult> results;
  for (auto& run : runs) results.push_back(run.get());
  return results;
}

TEST(TrainDistributedTest, TwoProcessesTrainOverTcpAndOnlyRankZeroSpeaksAndSnapshots) {
  TempDir dir;
  const std::vector<CliResult> r = RunRanks(WriteSolver(dir, 6, 3), 2);
  ASSERT_EQ(r[0].exit_code, 0) << r[0].output;
  ASSERT_EQ(r[1].exit_code, 0) << r[1].output;
  for (const char* text :
       {"Distributed training: 2 processes through tcp, 1 replica each; batch 4 "
        "per replica, 8 in all",
        "Iteration 5 (", "Snapshotting to binary proto file", "Optimization Done."}) {
    EXPECT_TRUE(r[0].Contains(text)) << "missing '" << text << "' in rank 0's output:\n"
                                     << r[0].output;
  }
  for (const char* text : {"Iteration ", "Snapshotting", "Distributed training"}) {
    EXPECT_FALSE(r[1].Contains(text)) << "'" << text << "' in rank 1's output:\n" << r[1].output;
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_3.caffemodel"));
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_6.solverstate"));
}

// The losses of "Iteration k (...), loss = X" lines, in order.
std::vector<double> Losses(const std::string& output) {
  std::vector<double> losses;
  const std::string key = "), loss = ";
  for (size_t at = output.find(key); at != std::string::npos; at = output.find(key, at + 1)) {
    losses.push_back(std::stod(output.substr(at + key.size())));
  }
  return losses;
}

// --allreduce=doubling (every exchange by recursive doubling, three ranks folding one in) trains
// as the ring does: the same losses to float rounding (the sums are added in another order).
TEST(TrainDistributedTest, RecursiveDoublingTrainsAsTheRingDoes) {
  std::vector<std::vector<double>> losses;
  for (const char* algorithm : {"--allreduce=ring", "--allreduce=doubling"}) {
    TempDir dir;
    const std::vector<CliResult> r = RunRanks(WriteSolver(dir, 8, 0), 3, {algorithm});
    for (int k = 0; k < 3; ++k) ASSERT_EQ(r[k].exit_code, 0) << algorithm << r[k].output;
    losses.push_back(Losses(r[0].output));
    if (std::string(algorithm) == "--allreduce=doubling") {
      EXPECT_TRUE(
          r[0].Contains("rank 0 pairs with ranks 1, 2 for allreduces by recursive doubling "
                        "and halving (doubling for every allreduce)"))
          << r[0].output;
    }
  }
  ASSERT_EQ(losses[0].size(), 8u);
  ASSERT_EQ(losses[1].size(), losses[0].size());
  for (size_t i = 0; i < losses[0].size(); ++i) {
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5 * std::max(1.0, std::fabs(losses[0][i])))
        << "iteration " << i + 1;
  }
}

// --exchange_precision=bfloat16: the ranks say what the gradients travel as, and train.
TEST(TrainDistributedTest, GradientsTravelAsBFloat16WhenAsked) {
  TempDir dir;
  const std::vector<CliResult> r =
      RunRanks(WriteSolver(dir, 4, 0), 2, {"--exchange_precision=bfloat16"});
  ASSERT_EQ(r[0].exit_code, 0) << r[0].output;
  ASSERT_EQ(r[1].exit_code, 0) << r[1].output;
  EXPECT_TRUE(r[0].Contains("Gradients travel between the ranks as bfloat16")) << r[0].output;
  EXPECT_TRUE(r[0].Contains("Optimization Done.")) << r[0].output;
}

#if CORTADO_WITH_UCX
TEST(TrainDistributedTest, TwoProcessesTrainOverUcxAndRankZeroNamesTheTransport) {
  TempDir dir;
  const std::vector<CliResult> r = RunRanks(WriteSolver(dir, 6, 3), 2, {"--comm=ucx"});
  ASSERT_EQ(r[0].exit_code, 0) << r[0].output;
  ASSERT_EQ(r[1].exit_code, 0) << r[1].output;
  for (const char* text : {"Distributed training: 2 processes through ucx, 1 replica each; batch 4 "
                           "per replica, 8 in all",
                           "Connection: ucx: rank 0 of 2; with rank 1 (127.0.0.1): ",
                           "Iteration 5 (", "Optimization Done."}) {
    EXPECT_TRUE(r[0].Contains(text)) << "missing '" << text << "' in rank 0's output:\n"
                                     << r[0].output;
  }
  EXPECT_FALSE(r[1].Contains("Iteration ")) << r[1].output;
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_6.solverstate"));
}
#endif

TEST(TrainDistributedTest, AKilledRankEndsTheOthersWithinTheTimeout) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<CliResult> r = RunRanks(WriteSolver(dir, 1000000, 0), 3, {"--comm_timeout=20"},
                                            [](int rank, const std::string& out, pid_t pid) {
                                              // Rank 0 displays; kill rank 2 once training runs
                                              // (its own output is quiet, so wait a moment for the
                                              // ring to be up).
                                              if (rank != 2) return true;
                                              (void)out;
                                              std::this_thread::sleep_for(std::chrono::seconds(1));
                                              kill(pid, SIGKILL);
                                              return true;
                                            });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r[0].exit_code, 0) << r[0].output;
  EXPECT_NE(r[1].exit_code, 0) << r[1].output;
  EXPECT_EQ(r[2].exit_code, 128 + SIGKILL);
  EXPECT_LT(seconds, 15.0) << "a peer's death must be seen at once, not at the 20 s timeout";
  // The neighbours of rank 2 name it.
  EXPECT_TRUE(r[0].Contains("rank 2") || r[1].Contains("rank 2")) << r[0].output << r[1].output;
}

TEST(TrainDistributedTest, FlagsThatDoNotMakeAWorldAreErrors) {
  TempDir dir;
  const std::string solver = "--solver=" + WriteSolver(dir, 2, 0);
  struct Case {
    std::vector<std::string> flags;
    const char* message;
  } cases[] = {
      {{"--world=2"}, "--world=2 needs --rank"},
      {{"--world=2", "--rank=2", "--peers=a:1,b:2"}, "--rank=2 is outside the world"},
      {{"--world=3", "--rank=0", "--peers=127.0.0.1:1,127.0.0.1:2"}, "--peers names 2 addresses"},
      {{"--world=2", "--rank=0", "--peers=127.0.0.1:1,127.0.0.1:2", "--comm=carrier-pigeon"},
       "unknown communicator backend 'carrier-pigeon'"},
      {{"--world=2", "--rank=0", "--comm_timeout=-1"}, "--comm_timeout must be"},
      {{"--world=2", "--rank=0", "--peers=127.0.0.1:1,127.0.0.1:2", "--exchange_precision=fp8"},
       "--exchange_precision must be auto, float32, bfloat16 or float16, got 'fp8'"},
      {{"--world=2", "--rank=0", "--peers=127.0.0.1:1,127.0.0.1:2", "--allreduce=tree"},
       "--allreduce must be auto, ring, doubling or halving, got 'tree'"},
      {{"--world=2", "--rank=0", "--peers=127.0.0.1:1,127.0.0.1:2", "--latency_kb=0"},
       "--latency_kb must be"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"train", solver};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const CliResult r = RunCli(args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_TRUE(r.Contains(c.message)) << "missing '" << c.message << "' in:\n" << r.output;
  }
}

TEST(TrainDistributedTest, AnUnreachablePeerFailsAfterTheConnectTimeout) {
  TempDir dir;
  const std::vector<std::string> peers = testing::LoopbackPeers(2);
  const auto start = std::chrono::steady_clock::now();
  const CliResult r =
      RunCli({"train", "--solver=" + WriteSolver(dir, 2, 0), "--world=2", "--rank=0",
              "--peers=" + testing::JoinPeers(peers), "--connect_timeout=2"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains(peers[1])) << r.output;
  EXPECT_LT(seconds, 10.0);
}

#if CORTADO_WITH_MPI
TEST(TrainDistributedTest, MpirunStartsTheRanks) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  const std::vector<std::string> backends = comm::CommunicatorBackends();
  if (std::find(backends.begin(), backends.end(), "mpi") == backends.end()) {
    GTEST_SKIP() << "this build has no mpi backend";
  }
  TempDir dir;
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const CliResult r = RunCli({"train", "--solver=" + WriteSolver(dir, 4, 4), "--threads=1"}, {},
                             {"mpirun", "--oversubscribe", "-np", "2", "--mca", "btl", "self,tcp"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(
      r.Contains("Distributed training: 2 processes through mpi, 1 replica each; batch 4 "
                 "per replica, 8 in all"))
      << r.output;
  EXPECT_TRUE(r.Contains("Optimization Done.")) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_4.caffemodel"));
}
#endif

}  // namespace
}  // namespace cortado
