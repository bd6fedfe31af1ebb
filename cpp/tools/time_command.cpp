// SPDX-License-Identifier: Apache-2.0
// `cortado time`: Caffe's `caffe time`. One forward and backward to warm up, then
// --iterations passes timing every layer's forward and backward; prints the per-layer averages
// and the average forward, backward and forward-backward time of the whole net. With --gpu the
// stream is synchronised after each layer, so a layer's time covers its kernels running, not
// only their launch. Layers fused into another (BatchNorm + Scale + ReLU) are listed as such;
// their time is the host layer's.
#include <chrono>

#include "core/logging.hpp"
#include "net/net.hpp"
#include "net/net_options.hpp"
#include "solvers/solver.hpp"
#include "tools/commands.hpp"
#include "tools/feed_check.hpp"
#include "tools/flags.hpp"
#include "tools/gpu_flag.hpp"

namespace cortado::tools {
namespace {

using Clock = std::chrono::steady_clock;

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

caffe::Phase ParsePhase(const std::string& text) {
  if (text == "TRAIN") return caffe::TRAIN;
  if (text == "TEST") return caffe::TEST;
  CORTADO_THROW(kInvalidArgument, "--phase must be TRAIN or TEST, got '{}'", text);
}

int TimeCommand(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"model", "", "the net prototxt to time"},
      {"iterations", "50", "number of timed forward-backward passes"},
      {"phase", "TRAIN", "net phase: TRAIN or TEST"},
      {"level", "0", "net level"},
      {"stage", "", "comma-separated net stages"},
      {"threads", "0", "CPU threads (0: all cores this process may use)"},
      {"gpu", "", "run on a GPU: 0, 0,1 or all (the first one listed is used)"},
      {"precision", "float32", kPrecisionHelp},
  };
  Flags flags(argc, argv, 2, specs);
  if (flags.Get("model").empty()) {
    CORTADO_THROW(kInvalidArgument, "cortado time needs --model\n{}", Flags::Usage(specs));
  }
  const int iterations = flags.GetInt("iterations");
  if (iterations <= 0) {
    CORTADO_THROW(kInvalidArgument, "--iterations must be positive, got {}", iterations);
  }
  if (flags.GetInt("threads") > 0) Context::SetNumThreads(flags.GetInt("threads"));
  Context ctx(flags.IsSet("gpu") ? FirstGpu(flags.Get("gpu")) : Device::Cpu());
  SetPrecision(ctx, ParsePrecisionFlag(flags.Get("precision")));
  ctx.MakeCurrent();
  if (ctx.device().is_cuda()) CORTADO_LOG_INFO("Use GPU with device ID {}", ctx.device().id);
  Net net(flags.Get("model"), ParsePhase(flags.Get("phase")), &ctx, flags.GetInt("level"),
          SplitList(flags.Get("stage")), NetOptionsFromEnvironment());
  RefuseFeedLayers(net, "cortado time");
  CORTADO_LOG_INFO("Performing Forward");
  const float initial_loss = net.Forward();
  CORTADO_LOG_INFO("Initial loss: {}", initial_loss);
  CORTADO_LOG_INFO("Performing Backward");
  net.Backward();
  ctx.Synchronize();

  const auto& layers = net.layers();
  const auto& bottoms = net.bottom_vecs();
  const auto& tops = net.top_vecs();
  const auto& need = net.bottom_need_backward();
  std::vector<double> forward_ms(layers.size(), 0.0);
  std::vector<double> backward_ms(layers.size(), 0.0);
  double forward_total = 0.0, backward_total = 0.0;
  CORTADO_LOG_INFO("*** Benchmark begins ***");
  CORTADO_LOG_INFO("Testing for {} iterations.", iterations);
  const auto total_start = Clock::now();
  for (int it = 0; it < iterations; ++it) {
    const auto iter_start = Clock::now();
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto start = Clock::now();
      layers[i]->Forward(bottoms[i], tops[i]);
      ctx.Synchronize();
      forward_ms[i] += MillisSince(start);
    }
    const double forward_time = MillisSince(iter_start);
    forward_total += forward_time;
    const auto backward_start = Clock::now();
    // Like `caffe time`, every layer runs backward (parameter gradients included).
    for (size_t i = layers.size(); i-- > 0;) {
      const auto start = Clock::now();
      layers[i]->Backward(tops[i], need[i], bottoms[i]);
      ctx.Synchronize();
      backward_ms[i] += MillisSince(start);
    }
    backward_total += MillisSince(backward_start);
    CORTADO_LOG_INFO("Iteration: {} forward-backward time: {:.3f} ms.", it + 1,
                     MillisSince(iter_start));
  }
  CORTADO_LOG_INFO("Average time per layer: ");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (const Layer* host = layers[i]->fused_into()) {
      // Its work is in the host's time (BatchNorm + Scale + ReLU fusion).
      CORTADO_LOG_INFO("{:>10}\tfused into {}", net.layer_names()[i], host->name());
      continue;
    }
    CORTADO_LOG_INFO("{:>10}\tforward: {:.5f} ms.", net.layer_names()[i],
                     forward_ms[i] / iterations);
    CORTADO_LOG_INFO("{:>10}\tbackward: {:.5f} ms.", net.layer_names()[i],
                     backward_ms[i] / iterations);
  }
  CORTADO_LOG_INFO("Average Forward pass: {:.5f} ms.", forward_total / iterations);
  CORTADO_LOG_INFO("Average Backward pass: {:.5f} ms.", backward_total / iterations);
  CORTADO_LOG_INFO("Average Forward-Backward: {:.5f} ms.", MillisSince(total_start) / iterations);
  CORTADO_LOG_INFO("Total Time: {:.3f} ms.", MillisSince(total_start));
  CORTADO_LOG_INFO("*** Benchmark ends ***");
  return 0;
}

}  // namespace cortado::tools
