// SPDX-License-Identifier: Apache-2.0
// `cortado time`, run as a separate process: per-layer lines, the averages, and the layers a
// BatchNorm computes in its own passes listed as fused into it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "core/config.hpp"
#include "solvers/tiny_problem.hpp"

namespace cortado {
namespace {

using cli_testing::CliResult;
using cli_testing::RunCli;
using solver_testing::TempDir;

const char kNet[] = R"(
name: 'bn'
layer { name: 'data' type: 'Input' top: 'x' top: 't'
        input_param { shape { dim: 4 dim: 2 dim: 3 dim: 3 } shape { dim: 4 dim: 2 } } }
layer { name: 'conv' type: 'Convolution' bottom: 'x' top: 'c'
        convolution_param { num_output: 3 kernel_size: 3 pad: 1
                            weight_filler { type: 'gaussian' std: 0.1 } } }
layer { name: 'conv_bn' type: 'BatchNorm' bottom: 'c' top: 'c' }
layer { name: 'conv_scale' type: 'Scale' bottom: 'c' top: 'c' scale_param { bias_term: true } }
layer { name: 'conv_relu' type: 'ReLU' bottom: 'c' top: 'c' }
layer { name: 'ip' type: 'InnerProduct' bottom: 'c' top: 'y'
        inner_product_param { num_output: 2 weight_filler { type: 'gaussian' std: 0.1 } } }
layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
)";

TEST(TimeCommandTest, ListsFusedLayersUnderTheirHost) {
  TempDir dir;
  std::ofstream(dir / "net.prototxt") << kNet;
  const CliResult r = RunCli({"time", "--model=" + (dir / "net.prototxt"), "--iterations=2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text :
       {"conv_bn\tforward:", "conv_bn\tbackward:", "conv_scale\tfused into conv_bn",
        "conv_relu\tfused into conv_bn", "ip\tforward:", "Average Forward-Backward:"}) {
    EXPECT_TRUE(r.Contains(text)) << "missing '" << text << "' in:\n" << r.output;
  }
  EXPECT_FALSE(r.Contains("conv_scale\tforward:")) << r.output;
}

TEST(TimeCommandTest, AnIntegerFlagOutOfRangeIsAnErrorNotAWrap) {
  TempDir dir;
  std::ofstream(dir / "net.prototxt") << kNet;
  // 2^32 + 1 would wrap to 1 as an int.
  const CliResult r =
      RunCli({"time", "--model=" + (dir / "net.prototxt"), "--iterations=4294967297"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("--iterations=4294967297 is out of range (-2147483648 to 2147483647)"))
      << r.output;
  EXPECT_FALSE(r.Contains("Average Forward-Backward")) << r.output;
}

TEST(TimeCommandTest, ANetFedFromSparkIsRefusedInsteadOfWaitingForever) {
  TempDir dir;
  std::ofstream(dir / "net.prototxt") << R"(
name: 'cos'
layer { name: 'data' type: 'CoSData' top: 'x' top: 't'
        source_class: 'com.yahoo.ml.caffe.DataFrameSource'
        cos_data_param { batch_size: 4
          top { name: 'x' type: FLOAT_ARRAY channels: 3 sample_num_axes: 1 }
          top { name: 't' type: INT channels: 1 sample_num_axes: 0 } } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y' inner_product_param { num_output: 2 } }
layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'y' bottom: 't' top: 'loss' }
)";
  for (const char* command : {"time", "test"}) {
    std::vector<std::string> args = {command, "--model=" + (dir / "net.prototxt"),
                                     "--iterations=1"};
    // `test` reads its weights after the net is checked: this file need not exist.
    if (std::string(command) == "test") args.push_back("--weights=" + (dir / "absent.caffemodel"));
    const CliResult r = RunCli(args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_TRUE(r.Contains("net 'cos': layer 'data' (CoSData) is fed from Spark")) << r.output;
    EXPECT_TRUE(r.Contains(std::string("cortado ") + command + " has nothing to feed it with"))
        << r.output;
  }
  std::ofstream(dir / "solver.prototxt")
      << "net: '" << (dir / "net.prototxt") << "'\nbase_lr: 0.1\nlr_policy: 'fixed'\nmax_iter: 2\n";
  const CliResult t = RunCli({"train", "--solver=" + (dir / "solver.prototxt")});
  EXPECT_NE(t.exit_code, 0) << t.output;
  EXPECT_TRUE(t.Contains("cortado train has nothing to feed it with")) << t.output;
}

TEST(TimeCommandTest, AnUnknownConvolutionAlgorithmIsAnError) {
  if (!CORTADO_WITH_ONEDNN) GTEST_SKIP() << "built without oneDNN: no CPU convolution plans";
  TempDir dir;
  std::ofstream(dir / "net.prototxt") << kNet;
  setenv("CORTADO_CPU_CONV", "fast", 1);  // inherited by the child
  const CliResult r = RunCli({"time", "--model=" + (dir / "net.prototxt"), "--iterations=1"});
  unsetenv("CORTADO_CPU_CONV");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("CORTADO_CPU_CONV must be auto, direct or winograd, not 'fast'"))
      << r.output;
  EXPECT_FALSE(r.Contains("Average Forward-Backward")) << r.output;
}

}  // namespace
}  // namespace cortado
