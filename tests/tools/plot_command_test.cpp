// SPDX-License-Identifier: Apache-2.0
// `cortado plot` as a separate process, on the log of a short real `cortado train` run (written
// to a temp dir): the PNG it writes, its summary, its default output name, and its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_runner.hpp"
#include "data/image_codec.hpp"
#include "plot/chart.hpp"
#include "solvers/tiny_problem.hpp"

namespace cortado {
namespace {

using cli_testing::CliResult;
using cli_testing::RunCli;
using solver_testing::TempDir;

const char kNet[] = R"(
name: 'plot'
layer { name: 'data' type: 'DummyData' top: 'x' top: 't'
        dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                           data_filler { type: 'gaussian' std: 1 } } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y'
        inner_product_param { num_output: 2 weight_filler { type: 'gaussian' std: 0.5 } } }
layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
)";

// Trains the tiny net for 12 iterations, testing every 4, and returns its log (train writes it
// to stderr, which RunCli collects).
std::string TrainLog(const TempDir& dir) {
  std::ofstream(dir / "net.prototxt") << kNet;
  std::ofstream(dir / "solver.prototxt")
      << "net: '" << (dir / "net.prototxt") << "'\n"
      << "test_iter: 1 test_interval: 4 base_lr: 0.01 lr_policy: 'step' gamma: 0.1 stepsize: 5\n"
      << "momentum: 0.9 display: 1 max_iter: 12 solver_mode: CPU random_seed: 5\n"
      << "snapshot_prefix: '" << (dir / "snap") << "'\n";
  const CliResult r = RunCli({"train", "--solver=" + (dir / "solver.prototxt")});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

// How many lines of `text` hold `needle`.
int CountLines(const std::string& text, const std::string& needle) {
  int count = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (text.substr(start, end - start).find(needle) != std::string::npos) ++count;
    start = end + 1;
  }
  return count;
}

TEST(PlotCommandTest, PlotsTheLogOfATrainingRun) {
  TempDir dir;
  const std::string log = TrainLog(dir);
  std::ofstream(dir / "train.log") << log;
  // The counts the summary must give, from the log itself: display lines ("Iteration N (...),
  // loss = " while training, "Iteration N, loss = " at the end) and test passes.
  const int iterations = CountLines(log, ", loss = ");
  const int passes = CountLines(log, ", Testing net (#");
  ASSERT_GE(iterations, 12);
  ASSERT_GE(passes, 3);

  const std::string png = dir / "curves.png";
  const CliResult r = RunCli({"plot", dir / "train.log", "--output=" + png, "--width=640",
                              "--height", "480", "--smooth=3"});
  if (!plot::PngAvailable()) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(r.Contains("no PNG support")) << r.output;
    GTEST_SKIP() << "no PNG support in this build";
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string summary = "Wrote " + png + ": 640x480, " + std::to_string(iterations) +
                              " iterations (0 to 12), " + std::to_string(passes) + " test passes";
  EXPECT_TRUE(r.Contains(summary)) << "missing '" << summary << "' in:\n" << r.output;
  ASSERT_TRUE(std::filesystem::exists(png));
  const std::string bytes = solver_testing::FileBytes(png);
  const DecodedImage image = DecodeImage(bytes.data(), bytes.size(), ColorMode::kKeep, png);
  EXPECT_EQ(image.width, 640);
  EXPECT_EQ(image.height, 480);
  EXPECT_EQ(image.channels, 3);
}

TEST(PlotCommandTest, WritesNextToTheLogByDefault) {
  if (!plot::PngAvailable()) GTEST_SKIP() << "no PNG support in this build";
  TempDir dir;
  std::ofstream(dir / "run.log") << "Iteration 0, loss = 1\nIteration 5, loss = 0.5\n";
  const CliResult r = RunCli({"plot", dir / "run.log"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("Wrote " + (dir / "run.log.png") +
                         ": 1200x900, 2 iterations (0 to 5), "
                         "0 test passes"))
      << r.output;
  const std::string bytes = solver_testing::FileBytes(dir / "run.log.png");
  const DecodedImage image = DecodeImage(bytes.data(), bytes.size(), ColorMode::kKeep, "png");
  EXPECT_EQ(image.width, 1200);
  EXPECT_EQ(image.height, 900);
}

TEST(PlotCommandTest, ErrorsNameTheLog) {
  TempDir dir;
  const CliResult missing = RunCli({"plot", dir / "absent.log"});
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(missing.Contains(dir / "absent.log")) << missing.output;

  std::ofstream(dir / "notes.txt") << "nothing to see\n";
  const CliResult empty = RunCli({"plot", dir / "notes.txt", "--output=" + (dir / "n.png")});
  EXPECT_EQ(empty.exit_code, 1) << empty.output;
  if (plot::PngAvailable()) {
    EXPECT_TRUE(empty.Contains(dir / "notes.txt" +
                               " has no training iterations: is it a Caffe training log?"))
        << empty.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "n.png"));

  const CliResult no_log = RunCli({"plot", "--width=640"});
  EXPECT_EQ(no_log.exit_code, 1) << no_log.output;
  EXPECT_TRUE(no_log.Contains("needs a training log")) << no_log.output;

  const CliResult bad_flag = RunCli({"plot", dir / "notes.txt", "--colour=red"});
  EXPECT_EQ(bad_flag.exit_code, 1) << bad_flag.output;
  EXPECT_TRUE(bad_flag.Contains("unknown flag '--colour'")) << bad_flag.output;

  std::ofstream(dir / "run.log") << "Iteration 0, loss = 1\n";
  const CliResult tiny = RunCli({"plot", dir / "run.log", "--width=10"});
  EXPECT_EQ(tiny.exit_code, 1) << tiny.output;
  if (plot::PngAvailable()) {
    EXPECT_TRUE(tiny.Contains("10x900")) << tiny.output;
  }

  const CliResult help = RunCli({"plot", "--help"});
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_TRUE(help.Contains("--smooth")) << help.output;
}

}  // namespace
}  // namespace cortado
