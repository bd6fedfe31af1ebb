// SPDX-License-Identifier: Apache-2.0
// The `cortado` command-line tool, in the manner of Caffe's `caffe` tool:
//   cortado train --solver=SOLVER.prototxt [--snapshot=S.solverstate | --weights=W.caffemodel]
//   cortado test --model=NET.prototxt --weights=W.caffemodel --iterations=N
//   cortado time --model=NET.prototxt --iterations=N
//   cortado device_query
//   cortado convert_idx --images=F --labels=F --out=DIR
//   cortado plot LOG [--output=PNG]
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <string>

#include "comm/rdma_devices.hpp"
#include "core/device_info.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/openmp_wait.hpp"
#include "tools/commands.hpp"
#include "tools/flags.hpp"

namespace cortado::tools {

int DeviceQueryCommand(int argc, char** argv) {
  Flags flags(argc, argv, 2, {});
  for (const auto& line : DescribeDevices()) std::printf("%s\n", line.c_str());
  for (const auto& line : comm::DescribeRdmaDevices()) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace cortado::tools

namespace {

const char kUsage[] =
    "usage: cortado <command> [flags]\n"
    "commands:\n"
    "  train         train or fine-tune a model from a solver prototxt\n"
    "  test          score a trained model over a number of batches\n"
    "  time          time a net's forward and backward passes, per layer\n"
    "  device_query  show the CPU, CUDA and RDMA devices this build can use\n"
    "  convert_idx   convert IDX (MNIST-format) images and labels into an LMDB of Datum\n"
    "  plot          draw the training curves of a training log as a PNG\n"
    "  export        write a trained model as ONNX (for ONNX Runtime, TensorRT, OpenCV, ...)\n"
    "Run 'cortado <command> --help' for a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  // OpenMP's idle threads sleep soon rather than spin on cores others need (core/preload.cpp).
  cortado::RestartForOpenMpWait(argv);
  const std::map<std::string, std::function<int(int, char**)>> commands = {
      {"train", cortado::tools::TrainCommand},
      {"test", cortado::tools::TestCommand},
      {"time", cortado::tools::TimeCommand},
      {"device_query", cortado::tools::DeviceQueryCommand},
      {"convert_idx", cortado::tools::ConvertIdxCommand},
      {"plot", cortado::tools::PlotCommand},
      {"export", cortado::tools::ExportCommand},
  };
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  auto it = commands.find(argv[1]);
  if (it == commands.end()) {
    std::fprintf(stderr, "cortado: unknown command '%s'\n%s", argv[1], kUsage);
    return 1;
  }
  try {
    return it->second(argc, argv);
  } catch (const cortado::tools::HelpRequested& help) {
    std::printf("usage: cortado %s [flags]\n%s", argv[1], help.what());
    return 0;
  } catch (const cortado::Error& e) {
    std::fprintf(stderr, "cortado %s: error: %s\n", argv[1], e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cortado %s: internal error: %s\n", argv[1], e.what());
    return 2;
  }
}
