// SPDX-License-Identifier: Apache-2.0
// The LRCN toy task (examples/lrcn-toy) through `cortado train`: the example's net (the layer
// types and structure of CaffeOnSpark's LRCN captioning net: Embed, two LSTMs with cont and a
// static input, an InnerProduct and a SoftmaxWithLoss over axis 2 with ignore_label) trains on
// generated sentences, and the loss falls and the test accuracy rises far above chance.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "solvers/tiny_problem.hpp"

namespace cortado {
namespace {

using cli_testing::CliResult;
using cli_testing::RunCli;
using solver_testing::TempDir;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// The values of every match of `pattern`'s first group in `text`, in order.
std::vector<float> AllValues(const std::string& text, const std::string& pattern) {
  std::vector<float> values;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    values.push_back(std::stof((*it)[1]));
  }
  return values;
}

// 0.84 measured after these 800 iterations (the full example: bench/RESULTS.md); chance is 1 in 21.
constexpr float kMinAccuracy = 0.75f;

TEST(LrcnToyTest, LstmNetLearnsTheSequences) {
  TempDir dir;
  // 60 training batches of 16 sentences (cycled), 10 test batches.
  const std::string make =
      std::string(LRCN_TOY_MAKE_SEQUENCES) + " '" + dir.path().string() + "' 60 10 16";
  ASSERT_EQ(std::system(make.c_str()), 0) << make;

  std::string net =
      ReadText(std::string(CORTADO_SOURCE_DIR) + "/examples/lrcn-toy/lrcn_toy.prototxt");
  net = std::regex_replace(net, std::regex("examples/lrcn-toy/data/"), dir.path().string() + "/");
  WriteText(dir / "net.prototxt", net);
  std::string solver =
      ReadText(std::string(CORTADO_SOURCE_DIR) + "/examples/lrcn-toy/lrcn_toy_solver.prototxt");
  solver =
      std::regex_replace(solver, std::regex("net: .*"), "net: \"" + (dir / "net.prototxt") + "\"");
  solver = std::regex_replace(solver, std::regex("max_iter: .*"), "max_iter: 800");
  solver = std::regex_replace(solver, std::regex("test_interval: .*"), "test_interval: 800");
  solver = std::regex_replace(solver, std::regex("test_iter: .*"), "test_iter: 10");
  solver = std::regex_replace(solver, std::regex("snapshot_prefix: .*"),
                              "snapshot_prefix: \"" + (dir / "lrcn") + "\"");
  WriteText(dir / "solver.prototxt", solver);

  const CliResult r = RunCli({"train", "--solver=" + (dir / "solver.prototxt")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Tested before the first step and after the last.
  const std::vector<float> accuracy =
      AllValues(r.output, R"(Test net output #\d+: accuracy = ([0-9.eE+-]+))");
  ASSERT_EQ(accuracy.size(), 2u) << r.output;
  EXPECT_LT(accuracy[0], 0.15f) << "chance is 1 in 21";
  EXPECT_GT(accuracy[1], kMinAccuracy) << r.output;
  const std::vector<float> loss = AllValues(r.output, R"(Iteration \d+.*, loss = ([0-9.eE+-]+))");
  ASSERT_GE(loss.size(), 2u) << r.output;
  EXPECT_LT(loss.back(), 0.5f * loss.front()) << r.output;
}

}  // namespace
}  // namespace cortado
