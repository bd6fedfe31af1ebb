// SPDX-License-Identifier: Apache-2.0
// The ONNX export, layer by layer and net by net: each net runs forward in Cortado on seeded
// inputs, is exported, passes ONNX's checker with strict shape inference (its outputs' inferred
// shapes the blobs' shapes), and OpenCV's dnn module runs the model on the same inputs to within
// 1e-4 of Cortado's outputs, relative to each output's largest magnitude (tests/onnx/run_onnx.py).
// Without Debian's python3-onnx and python3-opencv the tests skip, saying so.
#include "onnx/onnx_export.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "io/proto_io.hpp"
#include "net/net.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

namespace fs = std::filesystem;

// Runs `command`, returning its exit status and output.
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string Python() { return CORTADO_ONNX_PYTHON; }

// Why the ONNX tools cannot run here, or "" when they can.
const std::string& MissingTools() {
  static const std::string missing = [] {
    std::string out;
    const int status = RunCommand(Python() + " -c 'import onnx, cv2'", &out);
    return status == 0 ? std::string()
                       : Python() +
                             " cannot import onnx and cv2 (install Debian's python3-onnx "
                             "and python3-opencv): " +
                             out;
  }();
  return missing;
}

#define SKIP_WITHOUT_ONNX_TOOLS()                                \
  do {                                                           \
    if (!MissingTools().empty()) GTEST_SKIP() << MissingTools(); \
  } while (0)

fs::path TempDir(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("cortado_onnx_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteBlob(const fs::path& dir, const std::string& name, const Tensor& blob,
               std::ofstream* manifest, int index) {
  const std::string file = "blob" + std::to_string(index) + ".bin";
  std::ofstream out(dir / file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(blob.cpu_data()),
            static_cast<std::streamsize>(blob.count() * sizeof(float)));
  *manifest << name << " " << file;
  for (int d : blob.shape()) *manifest << " " << d;
  *manifest << "\n";
}

// Statistics, factors and slopes that Caffe initialises to constants, made varied so that a
// wrong mapping shows.
void VaryConstantBlobs(Net* net, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> small(-0.2f, 0.2f);
  std::uniform_real_distribution<float> around_one(0.5f, 1.5f);
  for (const auto& layer : net->layers()) {
    const std::string type = layer->type();
    auto& blobs = layer->blobs();
    auto fill = [&](Tensor* t, std::uniform_real_distribution<float>& dist) {
      float* d = t->mutable_cpu_data();
      for (int i = 0; i < t->count(); ++i) d[i] = dist(rng);
    };
    if (type == "BatchNorm") {
      fill(blobs[0].get(), small);
      fill(blobs[1].get(), around_one);
      blobs[2]->mutable_cpu_data()[0] = 1.0f;
    } else if (type == "Scale" || type == "PReLU") {
      if (!blobs.empty()) fill(blobs[0].get(), around_one);
      for (size_t i = 1; i < blobs.size(); ++i) fill(blobs[i].get(), small);
    } else if (type == "Bias") {
      for (auto& b : blobs) fill(b.get(), small);
    }
  }
}

struct Check {
  bool runtime = true;  // OpenCV runs it
  double tolerance = 1e-4;
  unsigned seed = 1;
  OnnxExportOptions options;
};

// Runs run_onnx.py on each `dirs` (its argument: the folder, ":no-runtime" after it where
// OpenCV does not run it) in one process; returns each folder's report, "" for a folder that
// passed.
std::map<std::string, std::string> RunChecks(const std::vector<std::string>& dirs,
                                             double tolerance) {
  std::string command = Python() + " " + CORTADO_SOURCE_DIR + "/tests/onnx/run_onnx.py" +
                        " --tolerance " + std::to_string(tolerance);
  for (const auto& dir : dirs) command += " " + dir;
  std::string out;
  RunCommand(command, &out);
  // Each folder's section ends "== <folder>: passed" or "== <folder>: FAILED".
  std::map<std::string, std::string> reports;
  size_t begin = 0;
  for (const auto& arg : dirs) {
    const std::string dir = arg.substr(0, arg.find(':'));
    const std::string passed = "== " + dir + ": passed\n";
    const size_t end = out.find("== " + dir + ": ", begin);
    if (end == std::string::npos) {
      reports[dir] = command + "\n" + out.substr(begin);
      continue;
    }
    const size_t next = out.find('\n', end);
    reports[dir] = out.compare(end, passed.size(), passed) == 0
                       ? ""
                       : out.substr(begin, next == std::string::npos ? next : next - begin);
    begin = next == std::string::npos ? out.size() : next + 1;
  }
  return reports;
}

// Runs `net` (its inputs already filled), exports `exported` (the same net, its weights shared,
// perhaps at another batch size; by default `net` itself) into a folder named `name` with the
// inputs and what `net` computed, for RunChecks. Returns the model.
onnx::ModelProto ExportCase(Net* net, const std::string& name, const Check& check,
                            std::string* dir_arg, Net* exported = nullptr) {
  VaryConstantBlobs(net, check.seed);
  net->Forward();
  const onnx::ModelProto model = ExportOnnx(exported ? *exported : *net, check.options);
  const fs::path dir = TempDir(name);
  *dir_arg = dir.string() + (check.runtime ? "" : ":no-runtime");
  {
    std::string bytes;
    EXPECT_TRUE(model.SerializeToString(&bytes));
    std::ofstream(dir / "model.onnx", std::ios::binary) << bytes;
    std::ofstream inputs(dir / "inputs.txt");
    std::ofstream outputs(dir / "outputs.txt");
    int index = 0;
    for (const auto& in : model.graph().input()) {
      WriteBlob(dir, in.name(), *net->blob_by_name(in.name()), &inputs, index++);
    }
    for (const auto& out : model.graph().output()) {
      WriteBlob(dir, out.name(), *net->blob_by_name(out.name()), &outputs, index++);
    }
  }
  return model;
}

// ExportCase, then RunChecks on its folder.
onnx::ModelProto ExportAndCheck(Net* net, const std::string& name, const Check& check,
                                Net* exported = nullptr) {
  std::string dir;
  const onnx::ModelProto model = ExportCase(net, name, check, &dir, exported);
  const std::string report = RunChecks({dir}, check.tolerance).begin()->second;
  EXPECT_EQ(report, "");
  if (report.empty()) fs::remove_all(dir);
  return model;
}

// Seeded inputs for every Input top (and the net's values elsewhere left as they are).
void FillInputs(Net* net, unsigned seed) {
  for (Tensor* in : net->input_blobs()) testing::FillUniform(in, -1.0f, 1.0f, seed++);
}

std::unique_ptr<Net> BuildNet(caffe::NetParameter param, Context* ctx) {
  param.mutable_state()->set_phase(caffe::TEST);
  return std::make_unique<Net>(param, ctx, OnnxExportNetOptions());
}

struct LayerCase {
  const char* name;
  const char* net;  // layers after an Input "data" (2 x 4 x 8 x 8 unless the text has its own)
  // Why OpenCV cannot run the exported model, or nullptr: it runs it (the checker runs always).
  const char* no_runtime = nullptr;
};

// One Input layer "data" of shape 2 x 4 x 8 x 8 and the case's layers.
std::string WithInput(const std::string& layers) {
  if (layers.find("type: 'Input'") != std::string::npos) return layers;
  return "layer { name: 'data' type: 'Input' top: 'data' input_param { shape { dim: 2 dim: 4 "
         "dim: 8 dim: 8 } } }\n" +
         layers;
}

#define FILLERS \
  "weight_filler { type: 'gaussian' std: 0.3 } bias_filler { type: 'gaussian' std: 0.3 }"

const LayerCase kLayerCases[] = {
    {"Convolution",
     "layer { name: 'c' type: 'Convolution' bottom: 'data' top: 'c' convolution_param { "
     "num_output: 6 kernel_size: 3 stride: 2 pad: 1 dilation: 2 group: 2 " FILLERS " } }"},
    {"ConvolutionRectangularNoBias",
     "layer { name: 'c' type: 'Convolution' bottom: 'data' top: 'c' convolution_param { "
     "num_output: 3 kernel_h: 3 kernel_w: 1 stride_h: 1 stride_w: 2 pad_h: 2 pad_w: 0 "
     "bias_term: false " FILLERS " } }"},
    {"Deconvolution",
     "layer { name: 'd' type: 'Deconvolution' bottom: 'data' top: 'd' convolution_param { "
     "num_output: 6 kernel_size: 4 stride: 2 pad: 1 group: 2 " FILLERS " } }"},
    {"PoolingMaxCeil",
     "layer { name: 'p' type: 'Pooling' bottom: 'data' top: 'p' pooling_param { pool: MAX "
     "kernel_size: 3 stride: 2 } }"},
    {"PoolingMaxPadCeil",
     "layer { name: 'p' type: 'Pooling' bottom: 'data' top: 'p' pooling_param { pool: MAX "
     "kernel_size: 3 stride: 2 pad: 1 } }"},
    {"PoolingAveCeil",
     "layer { name: 'p' type: 'Pooling' bottom: 'data' top: 'p' pooling_param { pool: AVE "
     "kernel_size: 3 stride: 2 } }"},
    {"PoolingAvePad",
     "layer { name: 'p' type: 'Pooling' bottom: 'data' top: 'p' pooling_param { pool: AVE "
     "kernel_size: 3 stride: 1 pad: 1 } }"},
    {"PoolingAvePadCeil",
     "layer { name: 'p' type: 'Pooling' bottom: 'data' top: 'p' pooling_param { pool: AVE "
     "kernel_size: 3 stride: 2 pad: 1 } }"},
    {"PoolingAveFloor",
     "layer { name: 'p' type: 'Pooling' bottom: 'data' top: 'p' pooling_param { pool: AVE "
     "kernel_size: 3 stride: 2 round_mode: FLOOR } }"},
    {"PoolingGlobalAve",
     "layer { name: 'p' type: 'Pooling' bottom: 'data' top: 'p' pooling_param { pool: AVE "
     "global_pooling: true } }"},
    {"PoolingGlobalMax",
     "layer { name: 'p' type: 'Pooling' bottom: 'data' top: 'p' pooling_param { pool: MAX "
     "global_pooling: true } }"},
    {"InnerProduct",
     "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param { "
     "num_output: 7 " FILLERS " } }"},
    {"InnerProductTransposed",
     "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param { "
     "num_output: 7 transpose: true " FILLERS " } }"},
    {"InnerProductAxis2",
     "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param { "
     "num_output: 5 axis: 2 " FILLERS " } }"},
    {"LRNAcrossChannels",
     "layer { name: 'n' type: 'LRN' bottom: 'data' top: 'n' lrn_param { local_size: 3 alpha: 0.5 "
     "beta: 0.75 k: 2 } }"},
    {"LRNWithinChannel",
     "layer { name: 'n' type: 'LRN' bottom: 'data' top: 'n' lrn_param { local_size: 3 alpha: 0.5 "
     "beta: 0.75 norm_region: WITHIN_CHANNEL } }"},
    {"BatchNorm", "layer { name: 'bn' type: 'BatchNorm' bottom: 'data' top: 'bn' }"},
    {"BatchNormScaleFolded",
     "layer { name: 'c' type: 'Convolution' bottom: 'data' top: 'c' convolution_param { "
     "num_output: 3 kernel_size: 1 " FILLERS " } }\n"
     "layer { name: 'bn' type: 'BatchNorm' bottom: 'c' top: 'c' }\n"
     "layer { name: 's' type: 'Scale' bottom: 'c' top: 'c' scale_param { bias_term: true } }"},
    {"Scale",
     "layer { name: 's' type: 'Scale' bottom: 'data' top: 's' scale_param { bias_term: true } }"},
    {"ScaleTwoAxes",
     "layer { name: 's' type: 'Scale' bottom: 'data' top: 's' scale_param { axis: 1 num_axes: 2 } "
     "}"},
    {"ScaleFromBottom",
     "layer { name: 'data' type: 'Input' top: 'data' top: 'f' input_param { shape { dim: 2 dim: 4 "
     "dim: 8 dim: 8 } shape { dim: 2 dim: 4 } } }\n"
     "layer { name: 's' type: 'Scale' bottom: 'data' bottom: 'f' top: 's' scale_param { axis: 0 } "
     "}"},
    {"Bias", "layer { name: 'b' type: 'Bias' bottom: 'data' top: 'b' }"},
    {"EltwiseSumCoefficients",
     "layer { name: 'data' type: 'Input' top: 'a' top: 'b' top: 'c' input_param { shape { dim: 2 "
     "dim: 3 dim: 4 dim: 4 } } }\n"
     "layer { name: 'e' type: 'Eltwise' bottom: 'a' bottom: 'b' bottom: 'c' top: 'e' "
     "eltwise_param { operation: SUM coeff: 1 coeff: -0.5 coeff: 2 } }"},
    {"EltwiseProduct",
     "layer { name: 'data' type: 'Input' top: 'a' top: 'b' top: 'c' input_param { shape { dim: 2 "
     "dim: 3 dim: 4 dim: 4 } } }\n"
     "layer { name: 'e' type: 'Eltwise' bottom: 'a' bottom: 'b' bottom: 'c' top: 'e' "
     "eltwise_param { operation: PROD } }"},
    {"EltwiseMax",
     "layer { name: 'data' type: 'Input' top: 'a' top: 'b' input_param { shape { dim: 2 dim: 3 "
     "dim: 4 dim: 4 } } }\n"
     "layer { name: 'e' type: 'Eltwise' bottom: 'a' bottom: 'b' top: 'e' eltwise_param { "
     "operation: MAX } }"},
    {"Concat",
     "layer { name: 'data' type: 'Input' top: 'a' top: 'b' input_param { shape { dim: 2 dim: 3 "
     "dim: 4 dim: 4 } shape { dim: 2 dim: 5 dim: 4 dim: 4 } } }\n"
     "layer { name: 'c' type: 'Concat' bottom: 'a' bottom: 'b' top: 'c' }"},
    {"ConcatAxis2",
     "layer { name: 'data' type: 'Input' top: 'a' top: 'b' input_param { shape { dim: 2 dim: 3 "
     "dim: 4 dim: 4 } shape { dim: 2 dim: 3 dim: 2 dim: 4 } } }\n"
     "layer { name: 'c' type: 'Concat' bottom: 'a' bottom: 'b' top: 'c' concat_param { axis: 2 } "
     "}"},
    {"Slice",
     "layer { name: 's' type: 'Slice' bottom: 'data' top: 's0' top: 's1' top: 's2' slice_param { "
     "axis: 1 slice_point: 1 slice_point: 3 } }"},
    {"Split",
     "layer { name: 's' type: 'Split' bottom: 'data' top: 'a' top: 'b' }\n"
     "layer { name: 'r' type: 'ReLU' bottom: 'a' top: 'r' }\n"
     "layer { name: 't' type: 'TanH' bottom: 'b' top: 't' }"},
    {"Flatten", "layer { name: 'f' type: 'Flatten' bottom: 'data' top: 'f' }"},
    {"FlattenMiddleAxes",
     "layer { name: 'f' type: 'Flatten' bottom: 'data' top: 'f' flatten_param { axis: 1 end_axis: "
     "2 } }"},
    {"Reshape",
     "layer { name: 'r' type: 'Reshape' bottom: 'data' top: 'r' reshape_param { shape { dim: 0 "
     "dim: -1 dim: 16 } } }"},
    {"Softmax", "layer { name: 's' type: 'Softmax' bottom: 'data' top: 's' }"},
    {"SoftmaxAxis2",
     "layer { name: 's' type: 'Softmax' bottom: 'data' top: 's' softmax_param { axis: 2 } }"},
    {"ReLU", "layer { name: 'r' type: 'ReLU' bottom: 'data' top: 'r' }"},
    {"ReLUNegativeSlope",
     "layer { name: 'r' type: 'ReLU' bottom: 'data' top: 'r' relu_param { negative_slope: 0.1 } }"},
    {"PReLU", "layer { name: 'r' type: 'PReLU' bottom: 'data' top: 'r' }"},
    {"PReLUShared",
     "layer { name: 'r' type: 'PReLU' bottom: 'data' top: 'r' prelu_param { channel_shared: true } "
     "}"},
    {"Sigmoid", "layer { name: 's' type: 'Sigmoid' bottom: 'data' top: 's' }"},
    {"TanH", "layer { name: 't' type: 'TanH' bottom: 'data' top: 't' }"},
    {"ELU", "layer { name: 'e' type: 'ELU' bottom: 'data' top: 'e' elu_param { alpha: 0.7 } }"},
    {"Power",
     "layer { name: 'p' type: 'Power' bottom: 'data' top: 'p' power_param { power: 2 scale: 0.5 "
     "shift: 0.25 } }"},
    {"PowerSquareRoot",
     "layer { name: 'p' type: 'Power' bottom: 'data' top: 'p' power_param { power: 0.5 shift: 2 } "
     "}"},
    {"Exp",
     "layer { name: 'e' type: 'Exp' bottom: 'data' top: 'e' exp_param { base: 2 scale: 0.5 "
     "shift: 0.1 } }"},
    {"Log",
     "layer { name: 'l' type: 'Log' bottom: 'data' top: 'l' log_param { base: 10 scale: 0.5 "
     "shift: 2 } }"},
    {"AbsVal", "layer { name: 'a' type: 'AbsVal' bottom: 'data' top: 'a' }"},
    {"Dropout",
     "layer { name: 'd' type: 'Dropout' bottom: 'data' top: 'data' }\n"
     "layer { name: 'r' type: 'ReLU' bottom: 'data' top: 'r' }"},
    {"DropoutUnscaled",
     "layer { name: 'd' type: 'Dropout' bottom: 'data' top: 'd' dropout_param { dropout_ratio: "
     "0.3 scale_train: false } }"},
    {"BNLL", "layer { name: 'b' type: 'BNLL' bottom: 'data' top: 'b' }"},
    {"Threshold",
     "layer { name: 't' type: 'Threshold' bottom: 'data' top: 't' threshold_param { threshold: 0.2 "
     "} }",
     "OpenCV 4.6 cannot size a Cast of Greater's boolean output"},
    {"Clip",
     "layer { name: 'c' type: 'Clip' bottom: 'data' top: 'c' clip_param { min: -0.3 max: 0.5 } }",
     "OpenCV 4.6 reads Clip only with min and max as attributes (opset 6)"},
    {"Swish",
     "layer { name: 's' type: 'Swish' bottom: 'data' top: 's' swish_param { beta: 1.5 } }"},
    {"Crop",
     "layer { name: 'data' type: 'Input' top: 'data' top: 'ref' input_param { shape { dim: 2 dim: "
     "4 "
     "dim: 8 dim: 8 } shape { dim: 2 dim: 4 dim: 5 dim: 6 } } }\n"
     "layer { name: 'c' type: 'Crop' bottom: 'data' bottom: 'ref' top: 'c' crop_param { axis: 2 "
     "offset: 1 offset: 2 } }"},
    {"Tile",
     "layer { name: 't' type: 'Tile' bottom: 'data' top: 't' tile_param { axis: 1 tiles: 3 } }",
     "OpenCV 4.6 has no Tile"},
    {"ReductionSum",
     "layer { name: 'r' type: 'Reduction' bottom: 'data' top: 'r' reduction_param { axis: 1 } }",
     "OpenCV 4.6 reads ReduceSum only before opset 13"},
    {"ReductionAbsoluteSum",
     "layer { name: 'r' type: 'Reduction' bottom: 'data' top: 'r' reduction_param { operation: "
     "ASUM axis: 2 } }"},
    {"ReductionSumOfSquares",
     "layer { name: 'r' type: 'Reduction' bottom: 'data' top: 'r' reduction_param { operation: "
     "SUMSQ axis: 1 coeff: 0.5 } }",
     "OpenCV 4.6 fails to size ReduceSumSquare without kept axes"},
    {"ReductionMean",
     "layer { name: 'r' type: 'Reduction' bottom: 'data' top: 'r' reduction_param { operation: "
     "MEAN axis: -1 coeff: -2 } }"},
    {"ArgMax", "layer { name: 'a' type: 'ArgMax' bottom: 'data' top: 'a' }"},
    {"ArgMaxTopKWithValues",
     "layer { name: 'a' type: 'ArgMax' bottom: 'data' top: 'a' argmax_param { top_k: 3 "
     "out_max_val: true } }",
     "OpenCV 4.6 has no TopK"},
    {"ArgMaxAxis",
     "layer { name: 'a' type: 'ArgMax' bottom: 'data' top: 'a' argmax_param { axis: 1 top_k: 2 } }",
     "OpenCV 4.6 has no TopK"},
    {"Embed",
     "layer { name: 'data' type: 'Input' top: 'data' input_param { shape { dim: 2 dim: 5 } } }\n"
     "layer { name: 'e' type: 'Embed' bottom: 'data' top: 'e' embed_param { input_dim: 10 "
     "num_output: 4 " FILLERS " } }",
     "OpenCV 4.6 gathers only with constant indices"},
    {"MVN", "layer { name: 'm' type: 'MVN' bottom: 'data' top: 'm' }",
     "OpenCV 4.6 fails to size ReduceMean over several axes"},
    {"MVNAcrossChannels",
     "layer { name: 'm' type: 'MVN' bottom: 'data' top: 'm' mvn_param { across_channels: true "
     "eps: 0.001 } }",
     "OpenCV 4.6 fails to broadcast Div over several kept axes"},
    {"MVNMeanOnly",
     "layer { name: 'm' type: 'MVN' bottom: 'data' top: 'm' mvn_param { normalize_variance: false "
     "} }",
     "OpenCV 4.6 fails to size ReduceMean over several axes"},
    {"LSTM",
     "layer { name: 'data' type: 'Input' top: 'data' top: 'cont' input_param { shape { dim: 3 dim: "
     "2 dim: 4 } shape { dim: 3 dim: 2 } } }\n"
     "layer { name: 'l' type: 'LSTM' bottom: 'data' bottom: 'cont' top: 'l' recurrent_param { "
     "num_output: 5 " FILLERS " } }",
     "OpenCV 4.6 fails an assertion sizing its LSTM on this T x N x I input"},
    {"RNN",
     "layer { name: 'data' type: 'Input' top: 'data' top: 'cont' input_param { shape { dim: 3 dim: "
     "2 dim: 4 } shape { dim: 3 dim: 2 } } }\n"
     "layer { name: 'r' type: 'RNN' bottom: 'data' bottom: 'cont' top: 'r' recurrent_param { "
     "num_output: 5 " FILLERS " } }",
     "OpenCV 4.6 has no RNN"},
    {"Parameter",
     "layer { name: 'p' type: 'Parameter' top: 'p' parameter_param { shape { dim: 2 dim: 4 dim: 8 "
     "dim: 8 } } }\n"
     "layer { name: 'e' type: 'Eltwise' bottom: 'data' bottom: 'p' top: 'e' }"},
    {"BatchReindex",
     "layer { name: 'data' type: 'Input' top: 'data' top: 'idx' input_param { shape { dim: 3 dim: "
     "4 } shape { dim: 5 } } }\n"
     "layer { name: 'b' type: 'BatchReindex' bottom: 'data' bottom: 'idx' top: 'b' }",
     "OpenCV 4.6 gathers only with constant indices"},
};

// Inputs a layer reads as indices or flags.
void FillSpecialInputs(const std::string& name, Net* net) {
  auto set = [&](const std::string& blob, const std::vector<float>& values) {
    float* d = net->blob_by_name(blob)->mutable_cpu_data();
    std::copy(values.begin(), values.end(), d);
  };
  if (name == "Embed") set("data", {0, 3, 9, 1, 1, 7, 2, 5, 8, 4});
  if (name == "LSTM" || name == "RNN") set("cont", {0, 0, 1, 1, 1, 1});
  if (name == "BatchReindex") set("idx", {2, 0, 1, 1, 2});
}

// Every case exported, then checked in one run of run_onnx.py (a Python and OpenCV start each
// would cost more than the checks); a failure names its case.
TEST(OnnxLayerTest, EveryLayerMatchesCortado) {
  SKIP_WITHOUT_ONNX_TOOLS();
  Context ctx(Device::Cpu());
  ctx.MakeCurrent();
  std::vector<std::string> dirs;
  std::vector<std::string> names;
  for (const LayerCase& c : kLayerCases) {
    SCOPED_TRACE(c.name);
    auto net = BuildNet(testing::NetParam("name: 'one' " + WithInput(c.net)), &ctx);
    FillInputs(net.get(), 7);
    FillSpecialInputs(c.name, net.get());
    Check check;
    check.runtime = c.no_runtime == nullptr;
    if (!check.runtime) std::printf("%s: not run by OpenCV: %s\n", c.name, c.no_runtime);
    std::string dir;
    ExportCase(net.get(), c.name, check, &dir);
    dirs.push_back(dir);
    names.push_back(c.name);
  }
  const auto reports = RunChecks(dirs, Check{}.tolerance);
  int passed = 0;
  for (size_t i = 0; i < dirs.size(); ++i) {
    const std::string dir = dirs[i].substr(0, dirs[i].find(':'));
    const std::string& report = reports.at(dir);
    EXPECT_EQ(report, "") << names[i];
    if (report.empty()) {
      ++passed;
      fs::remove_all(dir);
    }
  }
  std::printf("%d of %zu layer cases passed\n", passed, dirs.size());
}

// Every Input shape's first axis set to `batch`.
caffe::NetParameter AtBatch(caffe::NetParameter param, int batch) {
  for (auto& layer : *param.mutable_layer()) {
    if (layer.type() != "Input") continue;
    for (auto& shape : *layer.mutable_input_param()->mutable_shape()) shape.set_dim(0, batch);
  }
  return param;
}

struct NetCase {
  const char* name;
  const char* file;  // under the source tree, or ../shared for the reference models
  bool shared = false;
};

const NetCase kNetCases[] = {
    {"LeNet", "bench/models/lenet_train.prototxt"},
    {"Cifar10Quick", "bench/models/cifar10_quick_train.prototxt"},
    {"CaffeNet", "bench/models/caffenet_train.prototxt"},
    {"GoogLeNet", "bench/models/googlenet_train.prototxt"},
    {"ResNet50", "bench/models/resnet50_train.prototxt"},
    {"SqueezeNet", "bench/models/squeezenet_v1_1_train.prototxt"},
    {"MobileNet", "bench/models/mobilenet_v1_train.prototxt"},
    {"ReferenceLeNetDeploy", "reference-models/lenet/lenet.prototxt", true},
};

class OnnxNetTest : public ::testing::TestWithParam<NetCase> {};

// The whole net at batch 1 exported, and run by OpenCV at batch 2 (the model's batch is N).
TEST_P(OnnxNetTest, MatchesCortadoAtAnotherBatchSize) {
  SKIP_WITHOUT_ONNX_TOOLS();
  const NetCase& c = GetParam();
  const fs::path path = fs::path(c.shared ? CORTADO_SHARED_DIR : CORTADO_SOURCE_DIR) / c.file;
  if (c.shared && !fs::exists(path)) {
    GTEST_SKIP() << path << " not found (../shared beside the checkout, which CI provides)";
  }
  Context ctx(Device::Cpu());
  ctx.MakeCurrent();
  const caffe::NetParameter param = io::ReadNetParameterFromTextFile(path.string());
  auto exported = BuildNet(AtBatch(param, 1), &ctx);
  auto run = BuildNet(AtBatch(param, 2), &ctx);
  run->ShareTrainedLayersWith(*exported);
  FillInputs(run.get(), 3);
  for (Tensor* in : run->input_blobs()) {  // labels, where a net has them, are class indices
    if (in->num_axes() == 1) std::fill_n(in->mutable_cpu_data(), in->count(), 1.0f);
  }
  const onnx::ModelProto model = ExportAndCheck(run.get(), c.name, Check{}, exported.get());
  ASSERT_EQ(model.graph().input_size(), 1);
  EXPECT_EQ(model.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "N");
}

INSTANTIATE_TEST_SUITE_P(Nets, OnnxNetTest, ::testing::ValuesIn(kNetCases),
                         [](const ::testing::TestParamInfo<NetCase>& p) {
                           return std::string(p.param.name);
                         });

std::string ExportError(const std::string& layers, const OnnxExportOptions& options = {}) {
  Context ctx(Device::Cpu());
  ctx.MakeCurrent();
  auto net = BuildNet(testing::NetParam("name: 'bad' " + WithInput(layers)), &ctx);
  try {
    ExportOnnx(*net, options);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OnnxExportTest, RefusesALayerWithoutCounterpartNamingIt) {
  EXPECT_NE(ExportError("layer { name: 'spp' type: 'SPP' bottom: 'data' top: 's' spp_param { "
                        "pyramid_height: 2 } }")
                .find("layer 'spp' (type SPP) cannot be exported to ONNX"),
            std::string::npos);
  EXPECT_NE(ExportError("layer { name: 'i' type: 'Im2col' bottom: 'data' top: 'i' "
                        "convolution_param { kernel_size: 2 } }")
                .find("layer 'i' (type Im2col) cannot be exported to ONNX: ONNX has no operator"),
            std::string::npos);
}

TEST(OnnxExportTest, RefusesALayerReadingALossOutput) {
  const std::string error = ExportError(
      "layer { name: 'data' type: 'Input' top: 'data' top: 'label' input_param { shape { dim: 2 "
      "dim: 5 } shape { dim: 2 } } }\n"
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param { "
      "num_output: 3 } }\n"
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip' bottom: 'label' top: 'loss' }\n"
      "layer { name: 'twice' type: 'Power' bottom: 'loss' top: 'twice' power_param { scale: 2 } }");
  EXPECT_NE(error.find("layer 'twice' (type Power) reads 'loss'"), std::string::npos) << error;
}

TEST(OnnxExportTest, RefusesAnOpsetOutOfRangeAndAFusedNet) {
  OnnxExportOptions options;
  options.opset = 12;
  EXPECT_NE(ExportError("layer { name: 'r' type: 'ReLU' bottom: 'data' top: 'r' }", options)
                .find("ONNX opset 12 is not supported: use 13 to 17"),
            std::string::npos);
  Context ctx(Device::Cpu());
  ctx.MakeCurrent();
  caffe::NetParameter param = testing::NetParam(
      "name: 'fused' " + WithInput("layer { name: 'r' type: 'ReLU' bottom: 'data' top: 'r' }"));
  param.mutable_state()->set_phase(caffe::TEST);
  Net fused(param, &ctx, NetOptions{});
  EXPECT_THROW(ExportOnnx(fused), Error);
}

// A train/test net's TEST phase: the data layer's top is the input, the label and the loss and
// accuracy layers are left out, the scores (the blob the loss read) are the output.
TEST(OnnxExportTest, LeavesOutLossesAndLabels) {
  Context ctx(Device::Cpu());
  ctx.MakeCurrent();
  auto net = BuildNet(testing::NetParam(R"(
    name: 'train_test'
    layer { name: 'data' type: 'Input' top: 'data' top: 'label'
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
    layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip' inner_product_param {
            num_output: 4 } }
    layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip' bottom: 'label' top: 'loss' }
    layer { name: 'acc' type: 'Accuracy' bottom: 'ip' bottom: 'label' top: 'acc' })"),
                      &ctx);
  const onnx::ModelProto model = ExportOnnx(*net);
  ASSERT_EQ(model.graph().input_size(), 1);
  EXPECT_EQ(model.graph().input(0).name(), "data");
  ASSERT_EQ(model.graph().output_size(), 1);
  EXPECT_EQ(model.graph().output(0).name(), "ip");
  EXPECT_EQ(model.graph().node_size(), 1);
  EXPECT_EQ(model.opset_import(0).version(), 13);
}

}  // namespace
}  // namespace cortado
