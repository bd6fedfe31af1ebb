// SPDX-License-Identifier: Apache-2.0
// Training curves of a training log (training_log.hpp) as a figure of four panels, 2 x 2:
//   kLossPanel  training loss vs iteration: every display's loss as a thin light line, its
//               moving average as a bold dark line, and the test nets' loss outputs (those
//               with Caffe's "(* w = x loss)" suffix, or named *loss*) with markers;
//   kTimePanel  training loss vs wall time (seconds, minutes or hours as the run's length fits);
//   kRatePanel  learning rate vs iteration (log10 axis when it spans more than a decade);
//   kTestPanel  the test nets' other outputs (accuracy and the like) vs iteration, one colour
//               each; the loss outputs when there are no others. Outputs of test net #K > 0 are
//               named "#K name".
// Non-finite losses are not drawn; a note on the panel counts them.
#pragma once

#include <string>

#include "plot/chart.hpp"
#include "plot/training_log.hpp"

namespace cortado::plot {

constexpr int kLossPanel = 0;
constexpr int kTimePanel = 1;
constexpr int kRatePanel = 2;
constexpr int kTestPanel = 3;

// The colours of the loss curves (the series of kLossPanel and kTimePanel).
constexpr Rgb kRawLossColor{158, 202, 225};
constexpr Rgb kSmoothedLossColor{8, 69, 148};

struct PlotOptions {
  int width = 1200;
  int height = 900;
  // The moving average's window, in logged iterations: 1 draws the losses as they are; 0 picks
  // one from the number of iterations (SmoothingWindow).
  int smooth = 0;
};

// The window `smooth` = 0 stands for with `count` logged iterations: a twentieth of them, from 1
// (no smoothing, under 20 iterations) to 50.
int SmoothingWindow(int count);

// The centred moving average of `values` over `window` points (fewer at the ends), non-finite
// values left out of every average; a non-finite value's own position stays non-finite.
std::vector<double> MovingAverage(const std::vector<double>& values, int window);

// The figure of `log` (the panels above). kInvalidArgument for a negative `smooth`.
Figure TrainingFigure(const TrainingLog& log, const PlotOptions& options);

// The whole way from the text of a log to PNG bytes: parse (named `source` in messages), lay
// out, render, encode. Throws what ParseTrainingLog, Render and EncodePng throw (kUnimplemented
// without PNG support, checked before parsing).
std::string PlotTrainingLog(const std::string& text, const std::string& source,
                            const PlotOptions& options);

}  // namespace cortado::plot
