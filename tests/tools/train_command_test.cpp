// SPDX-License-Identifier: Apache-2.0
// `cortado train`, run as a separate process on a tiny solver and net written to a temp dir:
// training output, --iterations, resuming, fine-tuning, damaged snapshots, the flag errors, and
// SIGINT/SIGHUP.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "core/context.hpp"
#include "io/proto_io.hpp"
#include "net/net.hpp"
#include "solvers/tiny_problem.hpp"

namespace cortado {
namespace {

using cli_testing::CliResult;
using cli_testing::RunCli;
using solver_testing::TempDir;

const char kNet[] = R"(
name: 'cli'
layer { name: 'data' type: 'DummyData' top: 'x' top: 't'
        dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                           data_filler { type: 'gaussian' std: 1 } } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y'
        inner_product_param { num_output: NOUT weight_filler { type: 'gaussian' std: 0.5 } } }
layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
)";

std::string NetText(int num_output) {
  std::string text = kNet;
  text.replace(text.find("NOUT"), 4, std::to_string(num_output));
  if (num_output != 2) text.replace(text.find("dim: 4 dim: 2"), 13, "dim: 4 dim: 3");
  return text;
}

// Writes net.prototxt and solver.prototxt into `dir`; returns the solver path.
std::string WriteSolver(const TempDir& dir, const std::string& extra = "", int max_iter = 4) {
  std::ofstream(dir / "net.prototxt") << NetText(2);
  std::ofstream(dir / "solver.prototxt")
      << "net: '" << (dir / "net.prototxt") << "'\n"
      << "test_iter: 2 test_interval: 2\n"
      << "base_lr: 0.01 lr_policy: 'fixed' momentum: 0.9 display: 1 max_iter: " << max_iter << "\n"
      << "snapshot_prefix: '" << (dir / "snap") << "' random_seed: 3\n"
      << extra << "\n";
  return dir / "solver.prototxt";
}

TEST(TrainCommandTest, TrainsTestsAndSnapshots) {
  TempDir dir;
  const CliResult r = RunCli({"train", "--solver=" + WriteSolver(dir, "solver_mode: CPU")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text : {"Iteration 0 (", "iter/s", "s/1 iters), loss = ",
                           "    Train net output #0: loss = ", " (* 1 = ", "Iteration 3, lr = 0.01",
                           "Iteration 0, Testing net (#0)", "Iteration 4, Testing net (#0)",
                           "    Test net output #0: loss = ", "Snapshotting to binary proto file ",
                           "Optimization Done."}) {
    EXPECT_TRUE(r.Contains(text)) << "missing '" << text << "' in:\n" << r.output;
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_4.caffemodel"));
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_4.solverstate"));
}

TEST(TrainCommandTest, IterationsOverridesMaxIterAndSnapshotResumes) {
  TempDir dir;
  const std::string solver = WriteSolver(dir, "solver_mode: CPU");
  const CliResult first = RunCli({"train", "--solver=" + solver, "--iterations=2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_2.solverstate"));
  EXPECT_FALSE(std::filesystem::exists(dir / "snap_iter_4.caffemodel"));
  const CliResult resumed =
      RunCli({"train", "--solver=" + solver, "--snapshot=" + (dir / "snap_iter_2.solverstate")});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(resumed.Contains("Resuming from")) << resumed.output;
  EXPECT_TRUE(resumed.Contains("Restoring previous solver status from")) << resumed.output;
  EXPECT_FALSE(resumed.Contains("Iteration 1 (")) << resumed.output;
  EXPECT_TRUE(resumed.Contains("Iteration 3 (")) << resumed.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_4.caffemodel"));
}

TEST(TrainCommandTest, FineTunesFromWeights) {
  TempDir dir;
  const std::string solver = WriteSolver(dir, "solver_mode: CPU");
  ASSERT_EQ(RunCli({"train", "--solver=" + solver, "--iterations=1"}).exit_code, 0);
  const CliResult r = RunCli({"train", "--solver=" + solver, "--iterations=1",
                              "--weights=" + (dir / "snap_iter_1.caffemodel")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("Finetuning from " + (dir / "snap_iter_1.caffemodel"))) << r.output;
}

TEST(TrainCommandTest, DamagedSnapshotsAreRefusedForResumingAndFineTuning) {
  TempDir dir;
  const std::string solver = WriteSolver(dir, "solver_mode: CPU");
  ASSERT_EQ(RunCli({"train", "--solver=" + solver, "--iterations=2"}).exit_code, 0);
  ASSERT_TRUE(std::filesystem::exists(dir / "snap_iter_2.sha256"));
  // One byte of the model changes after the snapshot was written.
  std::string bytes = solver_testing::FileBytes(dir / "snap_iter_2.caffemodel");
  bytes[bytes.size() / 2] = static_cast<char>(~bytes[bytes.size() / 2]);
  std::ofstream(dir / "snap_iter_2.caffemodel", std::ios::binary | std::ios::trunc) << bytes;
  for (const std::string& flag : {"--snapshot=" + (dir / "snap_iter_2.solverstate"),
                                  "--weights=" + (dir / "snap_iter_2.caffemodel")}) {
    const CliResult r = RunCli({"train", "--solver=" + solver, flag});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    for (const std::string& text :
         {dir / "snap_iter_2.caffemodel", dir / "snap_iter_2.sha256", std::string("damaged")}) {
      EXPECT_TRUE(r.Contains(text)) << flag << ": missing '" << text << "' in:\n" << r.output;
    }
    EXPECT_FALSE(r.Contains("Iteration 3 (")) << r.output;
  }
}

TEST(TrainCommandTest, SnapshotAndWeightsTogetherFail) {
  TempDir dir;
  const CliResult r = RunCli({"train", "--solver=" + WriteSolver(dir), "--snapshot=a.solverstate",
                              "--weights=b.caffemodel"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.Contains("--snapshot")) << r.output;
  EXPECT_TRUE(r.Contains("not both")) << r.output;
}

TEST(TrainCommandTest, WeightsOfTheWrongShapeNameTheLayerAndShapes) {
  TempDir dir;
  const std::string solver = WriteSolver(dir, "solver_mode: CPU");
  {
    Context ctx(Device::Cpu(), 1);
    caffe::NetParameter param;
    io::ReadProtoFromTextString(NetText(3), "<net>", &param);
    Net net(param, &ctx);
    caffe::NetParameter proto;
    net.ToProto(&proto);
    io::WriteProtoToBinaryFile(proto, dir / "wide.caffemodel");
  }
  const CliResult r =
      RunCli({"train", "--solver=" + solver, "--weights=" + (dir / "wide.caffemodel")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  for (const std::string& text : {std::string("wide.caffemodel"), std::string("'ip'"),
                                  std::string("3 3 (9)"), std::string("2 3 (6)")}) {
    EXPECT_TRUE(r.Contains(text)) << "missing '" << text << "' in:\n" << r.output;
  }
}

TEST(TrainCommandTest, MissingSolverAndBadFlagsAreErrors) {
  EXPECT_NE(RunCli({"train"}).exit_code, 0);
  const CliResult missing = RunCli({"train", "--solver=/no/such/solver.prototxt"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_TRUE(missing.Contains("/no/such/solver.prototxt")) << missing.output;
  TempDir dir;
  const CliResult effect =
      RunCli({"train", "--solver=" + WriteSolver(dir), "--sigint_effect=explode"});
  EXPECT_NE(effect.exit_code, 0);
  EXPECT_TRUE(effect.Contains("--sigint_effect")) << effect.output;
}

TEST(TrainCommandTest, GpuSolverModeWithoutGpuWarnsAndUsesTheCpu) {
  if (Context::CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  TempDir dir;
  const CliResult r =
      RunCli({"train", "--solver=" + WriteSolver(dir, "solver_mode: GPU"), "--iterations=1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("solver_mode is GPU")) << r.output;
  EXPECT_TRUE(r.Contains("Optimization Done.")) << r.output;
}

TEST(TrainCommandTest, SighupSnapshotsAndSigintStops) {
  // A practically endless run: SIGHUP at the first displayed iteration asks for a snapshot,
  // and SIGINT once it is written stops training (with the final snapshot, as in Caffe).
  TempDir dir;
  const std::string solver = WriteSolver(dir, "solver_mode: CPU", 100000000);
  bool sent_hup = false;
  bool sent_int = false;
  const CliResult r =
      RunCli({"train", "--solver=" + solver}, [&](const std::string& out, pid_t pid) {
        if (!sent_hup && out.find("Iteration 1 (") != std::string::npos) {
          kill(pid, SIGHUP);
          sent_hup = true;
        }
        if (sent_hup && !sent_int && out.find("Snapshotting solver state") != std::string::npos) {
          kill(pid, SIGINT);
          sent_int = true;
        }
        return sent_int;
      });
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("Optimization stopped early.")) << r.output;
  // The SIGHUP snapshot and the final one (the same files if SIGINT came in the same iteration).
  int snapshot_lines = 0;
  for (size_t pos = 0; (pos = r.output.find("Snapshotting solver state", pos)) != std::string::npos;
       ++pos) {
    ++snapshot_lines;
  }
  EXPECT_EQ(snapshot_lines, 2) << r.output;
  int state_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    state_files += entry.path().extension() == ".solverstate";
  }
  EXPECT_GE(state_files, 1);
}

TEST(TrainCommandTest, ANonFiniteLossStopsTrainingNamingTheIteration) {
  TempDir dir;
  // Constant inputs and weights and a learning rate that blows the weights up at once.
  std::ofstream(dir / "net.prototxt") << R"(
name: 'diverges'
layer { name: 'x' type: 'DummyData' top: 'x' top: 't'
        dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 1 }
                           data_filler { type: 'constant' value: 1 }
                           data_filler { type: 'constant' value: 0 } } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y'
        inner_product_param { num_output: 1 weight_filler { type: 'constant' value: 1 } } }
layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
)";
  std::ofstream(dir / "solver.prototxt") << "net: '" << (dir / "net.prototxt") << "'\n"
                                         << "base_lr: 1e30\nlr_policy: 'fixed'\nmax_iter: 5\n"
                                         << "display: 1\nsnapshot_after_train: false\n";
  const CliResult r = RunCli({"train", "--solver=" + (dir / "solver.prototxt")});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("iteration 1: the loss is inf")) << r.output;
  EXPECT_FALSE(r.Contains("Optimization Done")) << r.output;

  // Caffe's behaviour on request: train on to max_iter.
  const CliResult on = RunCli({"train", "--solver=" + (dir / "solver.prototxt")}, {},
                              {"env", "CORTADO_ALLOW_NONFINITE_LOSS=1"});
  EXPECT_EQ(on.exit_code, 0) << on.output;
  EXPECT_TRUE(on.Contains("Optimization Done")) << on.output;
}

// `cortado <command> --help` (and -help, -h) lists the command's flags on stdout, exit 0.
TEST(CliHelpTest, EachCommandListsItsFlags) {
  for (const char* command : {"train", "test", "time", "device_query", "convert_idx"}) {
    for (const char* flag : {"--help", "-help", "-h"}) {
      const CliResult r = RunCli({command, flag});
      EXPECT_EQ(r.exit_code, 0) << command << " " << flag << ": " << r.output;
      EXPECT_TRUE(r.Contains(std::string("usage: cortado ") + command)) << r.output;
      EXPECT_TRUE(r.Contains("flags:")) << r.output;
      EXPECT_FALSE(r.Contains("unknown flag")) << r.output;
    }
  }
  const CliResult train = RunCli({"train", "--help"});
  EXPECT_TRUE(train.Contains("--solver")) << train.output;
}

}  // namespace
}  // namespace cortado
