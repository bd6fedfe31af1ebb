// SPDX-License-Identifier: Apache-2.0
// `cortado test`, run as a separate process: per-batch lines and the means, with known values.
#include <gtest/gtest.h>

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

// x = 1 (4x3), t = 0.5 (4x2); with weights 0.1 and bias 0, y = 0.3 everywhere, so the
// Euclidean loss is 8 * 0.2^2 / (2 * 4) = 0.04 for every batch.
const char kNet[] = R"(
name: 'scored'
layer { name: 'data' type: 'DummyData' top: 'x' top: 't'
        dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                           data_filler { type: 'constant' value: 1 }
                           data_filler { type: 'constant' value: 0.5 } } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y'
        inner_product_param { num_output: 2 } }
layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
)";

void WriteModelAndWeights(const TempDir& dir) {
  std::ofstream(dir / "net.prototxt") << kNet;
  Context ctx(Device::Cpu(), 1);
  Net net(dir / "net.prototxt", caffe::TEST, &ctx);
  auto& blobs = net.layer_by_name("ip")->blobs();
  for (int i = 0; i < blobs[0]->count(); ++i) blobs[0]->mutable_cpu_data()[i] = 0.1f;
  for (int i = 0; i < blobs[1]->count(); ++i) blobs[1]->mutable_cpu_data()[i] = 0.0f;
  caffe::NetParameter proto;
  net.ToProto(&proto);
  io::WriteProtoToBinaryFile(proto, dir / "w.caffemodel");
}

TEST(TestCommandTest, PrintsEachBatchAndTheMeans) {
  TempDir dir;
  WriteModelAndWeights(dir);
  const CliResult r = RunCli({"test", "--model=" + (dir / "net.prototxt"),
                              "--weights=" + (dir / "w.caffemodel"), "--iterations=3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text :
       {"Running for 3 iterations.", "Batch 0, loss = 0.04", "Batch 2, loss = 0.04", "Loss: 0.04",
        "] loss = 0.04 (* 1 = 0.04 loss)"}) {
    EXPECT_TRUE(r.Contains(text)) << "missing '" << text << "' in:\n" << r.output;
  }
  EXPECT_FALSE(r.Contains("Batch 3,")) << r.output;
}

TEST(TestCommandTest, NeedsWeights) {
  TempDir dir;
  WriteModelAndWeights(dir);
  const CliResult r = RunCli({"test", "--model=" + (dir / "net.prototxt")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.Contains("--weights")) << r.output;
}

}  // namespace
}  // namespace cortado
