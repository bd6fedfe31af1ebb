// SPDX-License-Identifier: Apache-2.0
// `cortado export`, run as a separate process: LeNet with weights written here (not the fillers'
// values) comes out as an ONNX model with those weights, the flags change the opset and the batch
// axis, and the errors name what is wrong and leave no file behind. Builds without ONNX lack the
// command, and this file is empty there.
#include "core/config.hpp"

#if CORTADO_WITH_ONNX

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "core/context.hpp"
#include "io/proto_io.hpp"
#include "net/net.hpp"
#include "proto/onnx.pb.h"
#include "solvers/tiny_problem.hpp"

namespace cortado {
namespace {

using cli_testing::CliResult;
using cli_testing::RunCli;
using solver_testing::TempDir;

const std::string kLenet = std::string(CORTADO_SOURCE_DIR) + "/examples/lenet/lenet.prototxt";
constexpr int kLenetBatch = 64;  // lenet.prototxt's input_param

// Builds the net of `prototxt`, sets every weight to a pattern no filler gives, writes the net's
// weights to `caffemodel` and returns conv1's weights as bytes.
std::string WriteWeights(const std::string& prototxt, const std::string& caffemodel) {
  Context ctx(Device::Cpu(), 1);
  Net net(prototxt, caffe::TEST, &ctx);
  int k = 0;
  for (const auto& layer : net.layers()) {
    for (const auto& blob : layer->blobs()) {
      float* data = blob->mutable_cpu_data();
      for (int i = 0; i < blob->count(); ++i, ++k) data[i] = 0.001f * static_cast<float>(k % 997);
    }
  }
  caffe::NetParameter proto;
  net.ToProto(&proto);
  io::WriteProtoToBinaryFile(proto, caffemodel);
  const Tensor& w = *net.layer_by_name("conv1")->blobs()[0];
  return std::string(reinterpret_cast<const char*>(w.cpu_data()), w.count() * sizeof(float));
}

onnx::ModelProto ReadModel(const std::string& path) {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(io::ReadFile(path))) << path << " is not an ONNX model";
  return model;
}

int64_t DefaultOpset(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") return opset.version();
  }
  return -1;
}

const onnx::TensorProto* FindInitializer(const onnx::ModelProto& model, const std::string& name) {
  for (const auto& t : model.graph().initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// The names of the files in `dir`, to show that no temporary file is left there.
std::vector<std::string> FileNames(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

CliResult Export(const TempDir& dir, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"export", "--model=" + kLenet,
                                   "--weights=" + (dir / "lenet.caffemodel"),
                                   "--out=" + (dir / "lenet.onnx")};
  args.insert(args.end(), extra.begin(), extra.end());
  return RunCli(args);
}

TEST(ExportCommandTest, WritesLenetWithItsTrainedWeights) {
  TempDir dir;
  const std::string conv1 = WriteWeights(kLenet, dir / "lenet.caffemodel");
  const CliResult r = Export(dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("Wrote " + (dir / "lenet.onnx") + ": opset 13")) << r.output;

  const onnx::ModelProto model = ReadModel(dir / "lenet.onnx");
  EXPECT_EQ(model.ir_version(), 7);
  EXPECT_EQ(DefaultOpset(model), 13);
  const onnx::GraphProto& graph = model.graph();
  ASSERT_EQ(graph.input_size(), 1);
  EXPECT_EQ(graph.input(0).name(), "data");
  const auto& shape = graph.input(0).type().tensor_type().shape();
  ASSERT_EQ(shape.dim_size(), 4);
  EXPECT_EQ(shape.dim(0).dim_param(), "N");
  EXPECT_EQ(shape.dim(1).dim_value(), 1);
  EXPECT_EQ(shape.dim(2).dim_value(), 28);
  EXPECT_EQ(shape.dim(3).dim_value(), 28);
  ASSERT_EQ(graph.output_size(), 1);
  EXPECT_EQ(graph.output(0).name(), "prob");

  const onnx::TensorProto* weight = FindInitializer(model, "conv1/weight");
  ASSERT_NE(weight, nullptr) << "no initializer conv1/weight";
  EXPECT_EQ(weight->data_type(), onnx::TensorProto::FLOAT);
  EXPECT_EQ(std::vector<int64_t>(weight->dims().begin(), weight->dims().end()),
            (std::vector<int64_t>{20, 1, 5, 5}));
  EXPECT_TRUE(weight->raw_data() == conv1) << "conv1/weight is not the weights written";
}

TEST(ExportCommandTest, Opset17) {
  TempDir dir;
  WriteWeights(kLenet, dir / "lenet.caffemodel");
  const CliResult r = Export(dir, {"--opset=17"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const onnx::ModelProto model = ReadModel(dir / "lenet.onnx");
  EXPECT_EQ(DefaultOpset(model), 17);
  EXPECT_EQ(model.ir_version(), 8);
}

TEST(ExportCommandTest, FixedBatch) {
  TempDir dir;
  WriteWeights(kLenet, dir / "lenet.caffemodel");
  const CliResult r = Export(dir, {"--dynamic_batch=false"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const onnx::ModelProto model = ReadModel(dir / "lenet.onnx");
  ASSERT_EQ(model.graph().input_size(), 1);
  const auto& dim0 = model.graph().input(0).type().tensor_type().shape().dim(0);
  EXPECT_FALSE(dim0.has_dim_param()) << dim0.dim_param();
  EXPECT_EQ(dim0.dim_value(), kLenetBatch);
  ASSERT_EQ(model.graph().output_size(), 1);
  EXPECT_EQ(model.graph().output(0).type().tensor_type().shape().dim(0).dim_value(), kLenetBatch);
}

TEST(ExportCommandTest, NeedsOut) {
  TempDir dir;
  WriteWeights(kLenet, dir / "lenet.caffemodel");
  const CliResult r =
      RunCli({"export", "--model=" + kLenet, "--weights=" + (dir / "lenet.caffemodel")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.Contains("--out")) << r.output;
}

TEST(ExportCommandTest, RefusesAnOpsetOutOfRange) {
  TempDir dir;
  WriteWeights(kLenet, dir / "lenet.caffemodel");
  const CliResult r = Export(dir, {"--opset=12"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.Contains("--opset=12")) << r.output;
  EXPECT_TRUE(r.Contains("13 to 17")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "lenet.onnx"));
}

TEST(ExportCommandTest, RefusesWeightsOfAnotherNet) {
  TempDir dir;
  // LeNet with 7 filters in conv1: its weights do not fit lenet.prototxt's 20.
  std::string text = io::ReadFile(kLenet);
  const std::string from = "num_output: 20";
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, from.size(), "num_output: 7");
  std::ofstream(dir / "other.prototxt") << text;
  WriteWeights(dir / "other.prototxt", dir / "other.caffemodel");

  const CliResult r =
      RunCli({"export", "--model=" + kLenet, "--weights=" + (dir / "other.caffemodel"),
              "--out=" + (dir / "lenet.onnx")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.Contains(dir / "other.caffemodel")) << r.output;
  EXPECT_TRUE(r.Contains("layer 'conv1'")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "lenet.onnx"));
}

TEST(ExportCommandTest, RefusesALayerWithoutCounterpartAndWritesNothing) {
  TempDir dir;
  std::ofstream(dir / "deploy.prototxt") << R"(
name: 'patches'
layer { name: 'data' type: 'Input' top: 'data'
        input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: 'x' type: 'Im2col' bottom: 'data' top: 'x'
        convolution_param { kernel_size: 3 } }
)";
  const CliResult r =
      RunCli({"export", "--model=" + (dir / "deploy.prototxt"), "--out=" + (dir / "x.onnx")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.Contains("layer 'x' (type Im2col) cannot be exported to ONNX")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.onnx"));
  EXPECT_EQ(FileNames(dir), std::vector<std::string>{"deploy.prototxt"});
}

TEST(ExportCommandTest, ReplacesAnExistingOutputAtomically) {
  TempDir dir;
  const std::string conv1 = WriteWeights(kLenet, dir / "lenet.caffemodel");
  std::ofstream(dir / "lenet.onnx") << "an older model";
  const CliResult r = Export(dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const onnx::ModelProto model = ReadModel(dir / "lenet.onnx");
  const onnx::TensorProto* weight = FindInitializer(model, "conv1/weight");
  ASSERT_NE(weight, nullptr);
  EXPECT_TRUE(weight->raw_data() == conv1);
  EXPECT_EQ(FileNames(dir), (std::vector<std::string>{"lenet.caffemodel", "lenet.onnx"}));
}

}  // namespace
}  // namespace cortado

#endif  // CORTADO_WITH_ONNX
