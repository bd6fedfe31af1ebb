// SPDX-License-Identifier: Apache-2.0
// `cortado plot`: training curves of a training log (Caffe's, `cortado train`'s, or the Spark
// API's) as a PNG; the work is in plot/.
#include <cstdio>
#include <string>

#include "core/error.hpp"
#include "io/proto_io.hpp"
#include "plot/chart.hpp"
#include "plot/training_log.hpp"
#include "plot/training_plot.hpp"
#include "tools/commands.hpp"
#include "tools/flags.hpp"

namespace cortado::tools {

int PlotCommand(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"output", "", "the PNG to write (default: LOG.png, next to the log)"},
      {"width", "1200", "image width in pixels"},
      {"height", "900", "image height in pixels"},
      {"smooth", "0",
       "moving-average window of the loss, in logged iterations (0: a twentieth of them, 1: "
       "none)"},
  };
  // The log is the one argument that is not a flag: take it out before parsing the flags.
  std::string log_path;
  std::vector<char*> flag_argv(argv, argv + 2);
  for (int i = 2; i < argc; ++i) {
    const bool is_flag = argv[i][0] == '-' && argv[i][1] != '\0';
    // "--output out.png": the value after a flag without '=' is the flag's, not the log.
    const bool is_value = i > 2 && argv[i - 1][0] == '-' &&
                          std::string(argv[i - 1]).find('=') == std::string::npos &&
                          !flag_argv.empty() && flag_argv.back() == argv[i - 1];
    if (!is_flag && !is_value && log_path.empty()) {
      log_path = argv[i];
    } else {
      flag_argv.push_back(argv[i]);
    }
  }
  Flags flags(static_cast<int>(flag_argv.size()), flag_argv.data(), 2, specs);
  if (log_path.empty()) {
    CORTADO_THROW(kInvalidArgument,
                  "cortado plot needs a training log: cortado plot LOG [flags]\n{}",
                  Flags::Usage(specs));
  }
  plot::PlotOptions options;
  options.width = flags.GetInt("width");
  options.height = flags.GetInt("height");
  options.smooth = flags.GetInt("smooth");
  const std::string output = flags.IsSet("output") ? flags.Get("output") : log_path + ".png";
  if (!plot::PngAvailable()) {
    CORTADO_THROW(kUnimplemented,
                  "cannot plot {}: this build has no PNG support (configure with WITH_IMAGES=ON "
                  "and libpng installed)",
                  log_path);
  }
  const plot::TrainingLog log = plot::ReadTrainingLog(log_path);
  const plot::RenderedFigure figure = plot::Render(plot::TrainingFigure(log, options));
  io::WriteFileAtomic(output, plot::EncodePng(figure.image));
  std::printf("Wrote %s: %dx%d, %zu iterations (%lld to %lld), %zu test passes\n", output.c_str(),
              figure.image.width(), figure.image.height(), log.train.size(),
              static_cast<long long>(log.train.front().iteration),
              static_cast<long long>(log.train.back().iteration), log.tests.size());
  return 0;
}

}  // namespace cortado::tools
