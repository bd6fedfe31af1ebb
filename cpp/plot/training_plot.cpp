// SPDX-License-Identifier: Apache-2.0
#include "plot/training_plot.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.hpp"

namespace cortado::plot {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr Rgb kRateColor{0, 109, 44};
// One colour per test output (Tableau's 10, without the blue of the training loss).
constexpr Rgb kPalette[] = {{230, 85, 13},   {44, 160, 44},   {214, 39, 40},
                            {148, 103, 189}, {140, 86, 75},   {227, 119, 194},
                            {23, 190, 207},  {127, 127, 127}, {188, 189, 34}};

// One named output of the test nets over the passes.
struct TestSeries {
  std::string name;
  std::vector<double> x, y;
  bool is_loss = false;
};

std::vector<TestSeries> CollectTestSeries(const TrainingLog& log) {
  std::vector<TestSeries> out;
  std::map<std::string, size_t> index;
  for (const TestRecord& pass : log.tests) {
    for (const NamedValue& v : pass.outputs) {
      const std::string name = pass.net > 0 ? fmt::format("#{} {}", pass.net, v.name) : v.name;
      auto [it, added] = index.emplace(name, out.size());
      if (added) out.push_back(TestSeries{name, {}, {}, false});
      TestSeries& s = out[it->second];
      s.x.push_back(static_cast<double>(pass.iteration));
      s.y.push_back(v.value);
      s.is_loss = s.is_loss || v.is_loss || v.name.find("loss") != std::string::npos;
    }
  }
  return out;
}

// The raw and smoothed loss over `x`, as the loss panels draw them.
void AddLossSeries(const std::vector<double>& x, const std::vector<double>& loss, int window,
                   float scale, Panel* panel) {
  if (window <= 1) {
    panel->series.push_back(Series{"train loss", x, loss, kSmoothedLossColor, 2.0f * scale, false});
    return;
  }
  panel->series.push_back(
      Series{"train loss", x, loss, kRawLossColor, 0.5f + 0.75f * scale, false});
  panel->series.push_back(Series{fmt::format("moving average of {}", window), x,
                                 MovingAverage(loss, window), kSmoothedLossColor,
                                 1.0f + 1.25f * scale, false});
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

int SmoothingWindow(int count) { return std::clamp(count / 20, 1, 50); }

std::vector<double> MovingAverage(const std::vector<double>& values, int window) {
  const size_t n = values.size();
  // Sums and counts of the finite values before each index, for O(n) averages.
  std::vector<double> sum(n + 1, 0.0);
  std::vector<size_t> count(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const bool finite = std::isfinite(values[i]);
    sum[i + 1] = sum[i] + (finite ? values[i] : 0.0);
    count[i + 1] = count[i] + (finite ? 1 : 0);
  }
  const size_t w = static_cast<size_t>(std::max(window, 1));
  std::vector<double> out(n, kNaN);
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) continue;
    const size_t lo = i >= (w - 1) / 2 ? i - (w - 1) / 2 : 0;
    const size_t hi = std::min(n, i + w / 2 + 1);
    out[i] = (sum[hi] - sum[lo]) / static_cast<double>(count[hi] - count[lo]);
  }
  return out;
}

Figure TrainingFigure(const TrainingLog& log, const PlotOptions& options) {
  if (options.smooth < 0) {
    CORTADO_THROW(kInvalidArgument, "smoothing window {}: must be 0 (automatic) or more",
                  options.smooth);
  }
  Figure figure;
  figure.width = options.width;
  figure.height = options.height;
  figure.columns = 2;
  figure.title = fmt::format("Training curves: {}", BaseName(log.source));
  const float scale = static_cast<float>(TextScale(options.width, options.height));

  std::vector<double> iterations, seconds, losses, rates;
  int non_finite = 0;
  for (const TrainRecord& r : log.train) {
    iterations.push_back(static_cast<double>(r.iteration));
    seconds.push_back(r.seconds);
    losses.push_back(r.loss);
    rates.push_back(r.lr);
    if (r.has_loss && !std::isfinite(r.loss)) ++non_finite;
  }
  const int window =
      options.smooth > 0 ? options.smooth : SmoothingWindow(static_cast<int>(log.train.size()));
  const std::string note = non_finite > 0 ? fmt::format("{} non-finite loss{} (nan/inf) not drawn",
                                                        non_finite, non_finite == 1 ? "" : "es")
                                          : "";
  const std::vector<TestSeries> tests = CollectTestSeries(log);

  Panel loss;
  loss.title = "Training loss";
  loss.x_label = "iteration";
  loss.y_label = "loss";
  AddLossSeries(iterations, losses, window, scale, &loss);
  // Each test output keeps its colour in both panels.
  const auto colour_of = [](size_t i) { return kPalette[i % std::size(kPalette)]; };
  for (size_t i = 0; i < tests.size(); ++i) {
    if (!tests[i].is_loss) continue;
    loss.series.push_back(Series{"test " + tests[i].name, tests[i].x, tests[i].y, colour_of(i),
                                 1.0f + 0.5f * scale, true});
  }
  if (!note.empty()) loss.notes.push_back(note);
  loss.empty_text = "no finite losses in the log";

  Panel time;
  time.title = "Training loss vs wall time";
  double last_second = 0.0;
  for (double s : seconds) {
    if (std::isfinite(s)) last_second = std::max(last_second, s);
  }
  double unit = 1.0;
  std::string unit_name = "s";
  if (last_second >= 3 * 3600.0) {
    unit = 3600.0;
    unit_name = "h";
  } else if (last_second >= 180.0) {
    unit = 60.0;
    unit_name = "min";
  }
  std::vector<double> time_axis;
  for (double s : seconds) time_axis.push_back(s / unit);
  time.x_label = fmt::format("wall time ({})", unit_name);
  time.y_label = "loss";
  if (log.has_time) {
    AddLossSeries(time_axis, losses, window, scale, &time);
    if (!note.empty()) time.notes.push_back(note);
  }
  time.empty_text = log.has_time ? "no finite losses in the log" : "no time stamps in the log";

  Panel rate;
  rate.title = "Learning rate";
  rate.x_label = "iteration";
  rate.y_label = "learning rate";
  rate.log_y_if_wide = true;
  rate.series.push_back(Series{"", iterations, rates, kRateColor, 1.0f + 1.0f * scale, false});
  rate.empty_text = "no learning rate lines in the log";

  Panel test;
  test.title = "Test outputs";
  test.x_label = "iteration";
  const bool any_other =
      std::any_of(tests.begin(), tests.end(), [](const TestSeries& t) { return !t.is_loss; });
  for (size_t i = 0; i < tests.size(); ++i) {
    if (any_other && tests[i].is_loss) continue;
    test.series.push_back(
        Series{tests[i].name, tests[i].x, tests[i].y, colour_of(i), 1.0f + 0.75f * scale, true});
  }
  test.y_label = test.series.size() == 1 ? test.series[0].name : "value";
  test.empty_text = "no test passes in the log";

  figure.panels = {std::move(loss), std::move(time), std::move(rate), std::move(test)};
  return figure;
}

std::string PlotTrainingLog(const std::string& text, const std::string& source,
                            const PlotOptions& options) {
  if (!PngAvailable()) {
    CORTADO_THROW(kUnimplemented,
                  "cannot plot {}: this build has no PNG support (configure with WITH_IMAGES=ON "
                  "and libpng installed)",
                  source);
  }
  const TrainingLog log = ParseTrainingLog(text, source);
  return EncodePng(Render(TrainingFigure(log, options)).image);
}

}  // namespace cortado::plot
