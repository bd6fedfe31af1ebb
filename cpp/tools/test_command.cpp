// SPDX-License-Identifier: Apache-2.0
// `cortado test`: Caffe's `caffe test`. Builds --model in the TEST phase, loads --weights, runs
// --iterations forward passes and logs every output element of every batch ("Batch i, name =
// v"), the mean loss, and the mean of each output element over the batches (with its weighted
// loss contribution for loss outputs).
#include "core/logging.hpp"
#include "net/net.hpp"
#include "net/net_options.hpp"
#include "solvers/solver.hpp"
#include "tools/commands.hpp"
#include "tools/feed_check.hpp"
#include "tools/flags.hpp"
#include "tools/gpu_flag.hpp"

namespace cortado::tools {

int TestCommand(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"model", "", "the net prototxt to score"},
      {"weights", "", "comma-separated .caffemodel[.h5] files with the trained weights"},
      {"iterations", "50", "number of batches to run"},
      {"level", "0", "net level"},
      {"stage", "", "comma-separated net stages"},
      {"threads", "0", "CPU threads (0: all cores this process may use)"},
      {"gpu", "", "run on a GPU: 0, 0,1 or all (the first one listed is used)"},
      {"precision", "float32", kPrecisionHelp},
  };
  Flags flags(argc, argv, 2, specs);
  if (flags.Get("model").empty()) {
    CORTADO_THROW(kInvalidArgument, "cortado test needs --model\n{}", Flags::Usage(specs));
  }
  if (flags.Get("weights").empty()) {
    CORTADO_THROW(kInvalidArgument, "cortado test needs --weights to score a model\n{}",
                  Flags::Usage(specs));
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
  Net net(flags.Get("model"), caffe::TEST, &ctx, flags.GetInt("level"),
          SplitList(flags.Get("stage")), NetOptionsFromEnvironment());
  RefuseFeedLayers(net, "cortado test");
  net.SetForwardOnly();
  if (net.options().share_buffers) net.ShareDataBuffers();
  for (const auto& path : SplitList(flags.Get("weights"))) CopyWeightsFromFile(path, &net);
  CORTADO_LOG_INFO("Running for {} iterations.", iterations);

  std::vector<float> scores;
  std::vector<int> score_output;
  double loss = 0.0;
  const auto& outputs = net.output_blobs();
  for (int i = 0; i < iterations; ++i) {
    loss += net.Forward();
    int idx = 0;
    for (size_t j = 0; j < outputs.size(); ++j) {
      const std::string& name = net.blob_names()[net.output_blob_indices()[j]];
      const float* values = outputs[j]->cpu_data();
      for (int k = 0; k < outputs[j]->count(); ++k, ++idx) {
        if (i == 0) {
          scores.push_back(values[k]);
          score_output.push_back(static_cast<int>(j));
        } else {
          scores[idx] += values[k];
        }
        CORTADO_LOG_INFO("Batch {}, {} = {:g}", i, name, values[k]);
      }
    }
  }
  CORTADO_LOG_INFO("Loss: {:g}", loss / iterations);
  for (size_t i = 0; i < scores.size(); ++i) {
    const int blob_index = net.output_blob_indices()[score_output[i]];
    const std::string& name = net.blob_names()[blob_index];
    const float loss_weight = net.blob_loss_weights()[blob_index];
    const float mean = scores[i] / static_cast<float>(iterations);
    std::string suffix;
    if (loss_weight != 0.0f) {
      suffix = fmt::format(" (* {:g} = {:g} loss)", loss_weight, loss_weight * mean);
    }
    CORTADO_LOG_INFO("{} = {:g}{}", name, mean, suffix);
  }
  return 0;
}

}  // namespace cortado::tools
