// SPDX-License-Identifier: Apache-2.0
// The --gpu flag: parsing (no GPU needed), its errors through the CLI, and, where a GPU exists,
// `cortado train --gpu=0,0` (two replicas on one GPU), `test --gpu=0` and `time --gpu=0`.
#include "tools/gpu_flag.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "solvers/solver.hpp"
#include "solvers/tiny_problem.hpp"
#include "support/gpu_check.hpp"

namespace cortado {
namespace {

using cli_testing::CliResult;
using cli_testing::RunCli;
using solver_testing::TempDir;
using tools::ParseGpuList;

std::string ParseError(const std::string& value, int device_count, bool cuda_build = true) {
  try {
    ParseGpuList(value, device_count, cuda_build);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "--gpu=" << value << " with " << device_count << " device(s) parsed";
  return {};
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(GpuFlagTest, ListsAllAndRepeats) {
  EXPECT_EQ(ParseGpuList("0", 1, true), (std::vector<int>{0}));
  EXPECT_EQ(ParseGpuList("0,1", 2, true), (std::vector<int>{0, 1}));
  EXPECT_EQ(ParseGpuList("1,0", 2, true), (std::vector<int>{1, 0}));
  EXPECT_EQ(ParseGpuList("0,0", 1, true), (std::vector<int>{0, 0}));
  EXPECT_EQ(ParseGpuList("all", 3, true), (std::vector<int>{0, 1, 2}));
}

TEST(GpuFlagTest, AllWithoutDevicesIsAnError) {
  const std::string message = ParseError("all", 0);
  EXPECT_TRUE(Contains(message, "--gpu=all")) << message;
  EXPECT_TRUE(Contains(message, "no CUDA device")) << message;
}

TEST(GpuFlagTest, MalformedValuesNameTheFlag) {
  for (const std::string value : {"x", "0,x", "-1", "1.5", "", ",", "true"}) {
    const std::string message = ParseError(value, 2);
    EXPECT_TRUE(Contains(message, "--gpu")) << message;
  }
  EXPECT_TRUE(Contains(ParseError("x", 2), "'x' is not an ordinal"));
}

TEST(GpuFlagTest, ADeviceThatDoesNotExistIsNamedWithTheCount) {
  const std::string message = ParseError("0,2", 2);
  EXPECT_TRUE(Contains(message, "--gpu=0,2")) << message;
  EXPECT_TRUE(Contains(message, "CUDA device 2 requested, but this machine has 2 CUDA device(s)"))
      << message;
  EXPECT_TRUE(Contains(ParseError("0", 0), "has 0 CUDA device(s) (or no CUDA driver)"));
}

TEST(GpuFlagTest, ABuildWithoutCudaRefusesTheFlag) {
  const std::string message = ParseError("0", 0, /*cuda_build=*/false);
  EXPECT_TRUE(Contains(message, "--gpu=0")) << message;
  EXPECT_TRUE(Contains(message, "no CUDA support")) << message;
}

TEST(PrecisionFlagTest, TakesTheFourPrecisionsAndNamesTheFlagOtherwise) {
  EXPECT_EQ(tools::ParsePrecisionFlag("float32"), caffe::SolverParameter::FLOAT32);
  EXPECT_EQ(tools::ParsePrecisionFlag("tf32"), caffe::SolverParameter::TF32);
  EXPECT_EQ(tools::ParsePrecisionFlag("float16"), caffe::SolverParameter::FLOAT16);
  EXPECT_EQ(tools::ParsePrecisionFlag("bfloat16"), caffe::SolverParameter::BFLOAT16);
  for (const std::string value : {"", "fp16", "TF32", "half", "bf16"}) {
    try {
      tools::ParsePrecisionFlag(value);
      ADD_FAILURE() << "--precision=" << value << " parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_TRUE(Contains(
          e.what(), "--precision takes float32, tf32, float16 or bfloat16; got '" + value + "'"))
          << e.what();
    }
  }
}

// ---- through the CLI ------------------------------------------------------------------------

const char kNet[] = R"(
name: 'cli'
layer { name: 'data' type: 'DummyData' top: 'x' top: 't'
        dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                           data_filler { type: 'gaussian' std: 1 } } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y'
        inner_product_param { num_output: 2 weight_filler { type: 'gaussian' std: 0.5 } } }
layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
)";

// Writes net.prototxt and solver.prototxt into `dir`; returns the solver path.
std::string WriteSolver(const TempDir& dir) {
  std::ofstream(dir / "net.prototxt") << kNet;
  std::ofstream(dir / "solver.prototxt")
      << "net: '" << (dir / "net.prototxt") << "'\n"
      << "test_iter: 2 test_interval: 2\n"
      << "base_lr: 0.01 lr_policy: 'fixed' momentum: 0.9 display: 1 max_iter: 4\n"
      << "snapshot_prefix: '" << (dir / "snap") << "' random_seed: 3 solver_mode: CPU\n";
  return dir / "solver.prototxt";
}

TEST(GpuFlagTest, TrainRejectsAMalformedGpuList) {
  TempDir dir;
  const CliResult r = RunCli({"train", "--solver=" + WriteSolver(dir), "--gpu=x"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
#if CORTADO_WITH_CUDA
  EXPECT_TRUE(r.Contains("--gpu takes 'all' or a comma-separated list")) << r.output;
#else
  EXPECT_TRUE(r.Contains("no CUDA support")) << r.output;  // said before the value is read
#endif
}

TEST(GpuFlagTest, TrainWithoutTheGpuNamesItAndTheCount) {
  if (testing::GpuAvailable()) GTEST_SKIP() << "this machine has a GPU";
  TempDir dir;
  const CliResult r = RunCli({"train", "--solver=" + WriteSolver(dir), "--gpu=0"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
#if CORTADO_WITH_CUDA
  EXPECT_TRUE(r.Contains("CUDA device 0 requested, but this machine has 0 CUDA device(s)"))
      << r.output;
#else
  EXPECT_TRUE(r.Contains("no CUDA support")) << r.output;
#endif
}

TEST(GpuFlagTest, TrainOnTwoReplicasOfOneGpu) {
  CORTADO_REQUIRE_GPU();
  TempDir dir;
  const CliResult r = RunCli({"train", "--solver=" + WriteSolver(dir), "--gpu=0,0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text : {"Using GPUs 0, 0", "Data-parallel training with 2 replicas",
                           "Iteration 4, Testing net (#0)", "Optimization Done."}) {
    EXPECT_TRUE(r.Contains(text)) << "missing '" << text << "' in:\n" << r.output;
  }
  // Only root logs: one line per displayed iteration.
  size_t count = 0;
  for (size_t at = r.output.find("Iteration 1 ("); at != std::string::npos;
       at = r.output.find("Iteration 1 (", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 1u) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_4.caffemodel"));
}

TEST(GpuFlagTest, TestAndTimeRunOnTheFirstListedGpu) {
  CORTADO_REQUIRE_GPU();
  TempDir dir;
  WriteSolver(dir);
  const CliResult trained =
      RunCli({"train", "--solver=" + (dir / "solver.prototxt"), "--iterations=1"});
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const CliResult tested =
      RunCli({"test", "--model=" + (dir / "net.prototxt"),
              "--weights=" + (dir / "snap_iter_1.caffemodel"), "--iterations=2", "--gpu=0"});
  ASSERT_EQ(tested.exit_code, 0) << tested.output;
  EXPECT_TRUE(tested.Contains("Use GPU with device ID 0")) << tested.output;
  EXPECT_TRUE(tested.Contains("Batch 1, loss = ")) << tested.output;
  const CliResult timed =
      RunCli({"time", "--model=" + (dir / "net.prototxt"), "--iterations=2", "--gpu=all"});
  ASSERT_EQ(timed.exit_code, 0) << timed.output;
  EXPECT_TRUE(timed.Contains("Use GPU with device ID 0")) << timed.output;
  EXPECT_TRUE(timed.Contains("Average Forward-Backward")) << timed.output;
}

TEST(PrecisionFlagTest, TrainTestAndTimeTakeTheFlag) {
  TempDir dir;
  const std::string solver = WriteSolver(dir);
  const CliResult bad =
      RunCli({"time", "--model=" + (dir / "net.prototxt"), "--iterations=1", "--precision=half"});
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(bad.Contains("--precision takes float32, tf32, float16 or bfloat16; got 'half'"))
      << bad.output;
  // On the CPU TF32 changes nothing but is accepted, and the log says where it applies.
  const CliResult trained = RunCli({"train", "--solver=" + solver, "--precision=tf32"});
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(
      trained.Contains("Precision: TF32 changes nothing on the CPU, which computes in float32"))
      << trained.output;
  // float16 on the CPU: accepted, computed in float32, with loss scaling on.
  const CliResult half = RunCli({"train", "--solver=" + solver, "--precision=float16"});
  ASSERT_EQ(half.exit_code, 0) << half.output;
  EXPECT_TRUE(
      half.Contains("Precision: FLOAT16 changes nothing on the CPU, which computes in float32"))
      << half.output;
  EXPECT_TRUE(half.Contains("Loss scaling: starts at 65536")) << half.output;
  const CliResult timed =
      RunCli({"time", "--model=" + (dir / "net.prototxt"), "--iterations=1", "--precision=tf32"});
  EXPECT_EQ(timed.exit_code, 0) << timed.output;
  const CliResult tested = RunCli({"test", "--model=" + (dir / "net.prototxt"),
                                   "--weights=" + (dir / "snap_iter_4.caffemodel"),
                                   "--iterations=1", "--precision=float32"});
  EXPECT_EQ(tested.exit_code, 0) << tested.output;
}

TEST(PrecisionFlagTest, TheSolverSetsItsContextBeforeBuildingTheNets) {
  TempDir dir;
  WriteSolver(dir);
  caffe::SolverParameter param = ReadSolverFile(dir / "solver.prototxt");
  for (const auto precision : {caffe::SolverParameter::TF32, caffe::SolverParameter::FLOAT32}) {
    param.set_precision(precision);
    Context ctx(Device::Cpu(), 1);
    ctx.set_allow_tf32(precision != caffe::SolverParameter::TF32);
    auto solver = CreateSolver(param, &ctx);
    EXPECT_EQ(ctx.allow_tf32(), precision == caffe::SolverParameter::TF32);
  }
}

}  // namespace
}  // namespace cortado
