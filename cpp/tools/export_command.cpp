// SPDX-License-Identifier: Apache-2.0
// `cortado export`: a net and its trained weights as an ONNX model (onnx/onnx_export.hpp). The net
// is built in the TEST phase on the CPU with every layer on its own; the model is written through
// a temporary name and a rename.
#include <cstdio>
#include <string>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "tools/commands.hpp"
#include "tools/flags.hpp"
#if CORTADO_WITH_ONNX
#include "io/proto_io.hpp"
#include "onnx/onnx_export.hpp"
#endif

namespace cortado::tools {

int ExportCommand(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"model", "", "the net prototxt (a deploy net, or a train/test net: its TEST phase)"},
      {"weights", "", "comma-separated .caffemodel[.h5] files with the trained weights"},
      {"out", "", "the ONNX file to write"},
      {"opset", "13", "the ONNX opset to declare (13 to 17)"},
      {"dynamic_batch", "true", "axis 0 of the inputs and outputs is symbolic (any batch size)"},
      {"level", "0", "net level"},
      {"stage", "", "comma-separated net stages"},
  };
  Flags flags(argc, argv, 2, specs);
  if (flags.Get("model").empty() || flags.Get("out").empty()) {
    CORTADO_THROW(kInvalidArgument, "cortado export needs --model and --out\n{}",
                  Flags::Usage(specs));
  }
#if CORTADO_WITH_ONNX
  OnnxExportOptions options;
  options.opset = flags.GetInt("opset");
  options.dynamic_batch = flags.GetBool("dynamic_batch");
  if (options.opset < kOnnxMinOpset || options.opset > kOnnxMaxOpset) {
    CORTADO_THROW(kInvalidArgument, "--opset={} is not supported: use {} to {}", options.opset,
                  kOnnxMinOpset, kOnnxMaxOpset);
  }
  Context ctx(Device::Cpu());
  ctx.MakeCurrent();
  Net net(flags.Get("model"), caffe::TEST, &ctx, flags.GetInt("level"),
          SplitList(flags.Get("stage")), OnnxExportNetOptions());
  const std::vector<std::string> weights = SplitList(flags.Get("weights"));
  if (weights.empty()) {
    CORTADO_LOG_WARN("no --weights: the model carries the fillers' initial values");
  }
  for (const auto& path : weights) CopyWeightsFromFile(path, &net);
  const onnx::ModelProto model =
      WithContext(flags.Get("model"), [&] { return ExportOnnx(net, options); });
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    CORTADO_THROW(kInternal, "the ONNX model of {} does not serialise", flags.Get("model"));
  }
  io::WriteFileAtomic(flags.Get("out"), bytes);
  const auto& graph = model.graph();
  std::string inputs;
  for (const auto& in : graph.input()) inputs += (inputs.empty() ? "" : ", ") + in.name();
  std::string outputs;
  for (const auto& out : graph.output()) outputs += (outputs.empty() ? "" : ", ") + out.name();
  std::printf("Wrote %s: opset %d, %d nodes, %d initializers, inputs %s, outputs %s\n",
              flags.Get("out").c_str(), options.opset, graph.node_size(), graph.initializer_size(),
              inputs.c_str(), outputs.c_str());
  return 0;
#else
  CORTADO_THROW(kUnimplemented,
                "this build has no ONNX export: install libonnx-dev and build again "
                "(CMake finds onnx/onnx.proto and sets WITH_ONNX)");
#endif
}

}  // namespace cortado::tools
