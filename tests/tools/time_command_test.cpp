// SPDX-License-Identifier: Apache-2.0
// `cortado time`, run as a separate process: per-layer lines, the averages, and the layers a
// BatchNorm computes in its own passes listed as fused into it.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_runner.hpp"
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

}  // namespace
}  // namespace cortado
