// SPDX-License-Identifier: Apache-2.0
// Training curves end to end: a log's text to PNG bytes, read back with the project's decoder,
// with the loss line where the loss panel's axes put it; the smoothing; the panels' contents.
#include "plot/training_plot.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "core/error.hpp"
#include "data/image_codec.hpp"

namespace cortado::plot {
namespace {

// A Caffe log whose loss falls on a straight line, 5 at iteration 0 to 1 at 1000, and whose lr
// steps down from 0.1 to 0.001; a test pass every 250 iterations.
std::string StraightLineLog() {
  std::string text;
  for (int it = 0; it <= 1000; it += 10) {
    const int s = it / 10;  // one iteration a second
    const std::string stamp = fmt::format("I0102 10:{:02d}:{:02d}.000000 77 ", s / 60, s % 60);
    if (it % 250 == 0) {
      text += stamp + "solver.cpp:337] Iteration " + std::to_string(it) + ", Testing net (#0)\n";
      text += stamp + "solver.cpp:404]     Test net output #0: accuracy = " +
              fmt::format("{:g}", 0.5 + it / 4000.0) + "\n";
      text += stamp + "solver.cpp:404]     Test net output #1: loss = 2 (* 1 = 2 loss)\n";
    }
    text += stamp + "solver.cpp:218] Iteration " + std::to_string(it) +
            " (1 iter/s, 10s/10 iters), loss = " + fmt::format("{:g}", 5.0 - 0.004 * it) + "\n";
    text += stamp + "sgd_solver.cpp:105] Iteration " + std::to_string(it) +
            ", lr = " + fmt::format("{:g}", std::pow(10.0, -1 - it / 334)) + "\n";
  }
  return text;
}

Rgb PixelOf(const DecodedImage& image, int x, int y) {
  const size_t plane = static_cast<size_t>(image.width) * image.height;
  const size_t i = static_cast<size_t>(y) * image.width + x;
  return Rgb{image.pixels[2 * plane + i], image.pixels[plane + i], image.pixels[i]};
}

// True when pixel (x, y) or one of its 8 neighbours is exactly `colour` (the middle of a 2-pixel
// line is full colour; its edges are blended).
bool ColourNear(const DecodedImage& image, int x, int y, Rgb colour) {
  for (int dy = -1; dy <= 1; ++dy) {
    for (int dx = -1; dx <= 1; ++dx) {
      if (PixelOf(image, x + dx, y + dy) == colour) return true;
    }
  }
  return false;
}

TEST(PlotTrainingTest, MovingAverageIsCentredAndSkipsNonFinite) {
  const std::vector<double> avg = MovingAverage({1, 2, 3, 4, 5}, 3);
  const std::vector<double> expected = {1.5, 2, 3, 4, 4.5};
  ASSERT_EQ(avg.size(), expected.size());
  for (size_t i = 0; i < avg.size(); ++i) EXPECT_DOUBLE_EQ(avg[i], expected[i]) << i;
  const std::vector<double> gaps = MovingAverage({1, NAN, 3, INFINITY, 7}, 3);
  EXPECT_DOUBLE_EQ(gaps[0], 1);
  EXPECT_TRUE(std::isnan(gaps[1]));
  EXPECT_DOUBLE_EQ(gaps[2], 3);
  EXPECT_FALSE(std::isfinite(gaps[3]));
  EXPECT_DOUBLE_EQ(gaps[4], 7);
  const std::vector<double> same = MovingAverage({4, 2, 9}, 1);
  EXPECT_DOUBLE_EQ(same[1], 2);
  EXPECT_EQ(SmoothingWindow(10), 1);
  EXPECT_EQ(SmoothingWindow(250), 12);
  EXPECT_EQ(SmoothingWindow(1000000), 50);
}

TEST(PlotTrainingTest, PngShowsTheLossWhereTheAxesPutIt) {
  if (!PngAvailable()) {
    EXPECT_THROW(PlotTrainingLog(StraightLineLog(), "line.log", PlotOptions{}), Error);
    GTEST_SKIP() << "no PNG support in this build";
  }
  PlotOptions options;
  options.width = 1000;
  options.height = 700;
  options.smooth = 1;  // the loss as it is: one dark line
  const std::string png = PlotTrainingLog(StraightLineLog(), "line.log", options);
  const DecodedImage image = DecodeImage(png.data(), png.size(), ColorMode::kColor, "line.png");
  ASSERT_EQ(image.width, 1000);
  ASSERT_EQ(image.height, 700);
  std::set<uint32_t> colours;
  for (int y = 0; y < image.height; y += 3) {
    for (int x = 0; x < image.width; x += 3) {
      const Rgb p = PixelOf(image, x, y);
      colours.insert(p.r << 16 | p.g << 8 | p.b);
    }
  }
  EXPECT_GT(colours.size(), 10u) << "a blank image";

  // The same figure's layout says where the lines are.
  const RenderedFigure rendered =
      Render(TrainingFigure(ParseTrainingLog(StraightLineLog(), "line.log"), options));
  const PanelLayout& loss = rendered.layouts[kLossPanel];
  const PanelLayout& time = rendered.layouts[kTimePanel];
  for (int it : {120, 480, 730, 990}) {
    const double value = 5.0 - 0.004 * it;
    const int px = static_cast<int>(std::floor(loss.x.ToPixel(it)));
    const int py = static_cast<int>(std::floor(loss.y.ToPixel(value)));
    EXPECT_TRUE(ColourNear(image, px, py, kSmoothedLossColor)) << "iteration " << it;
    // One iteration a second: the same line against time.
    const int tx = static_cast<int>(std::floor(time.x.ToPixel(it / 10.0)));
    const int ty = static_cast<int>(std::floor(time.y.ToPixel(value)));
    EXPECT_TRUE(ColourNear(image, tx, ty, kSmoothedLossColor)) << "second " << it / 10;
    // A loss unit above the line: background.
    const int above = static_cast<int>(std::floor(loss.y.ToPixel(value + 1.0)));
    EXPECT_FALSE(ColourNear(image, px, above, kSmoothedLossColor)) << "iteration " << it;
  }
  // 0.1 to 0.001 spans two decades: the lr axis is log10.
  EXPECT_TRUE(rendered.layouts[kRatePanel].y.log);
  EXPECT_FALSE(rendered.layouts[kTestPanel].empty);
}

TEST(PlotTrainingTest, PanelsHoldTheSeriesAndNotes) {
  std::string text = StraightLineLog();
  text += "Iteration 1010, loss = nan\nIteration 1020, loss = inf\n";
  text += "Iteration 1020, Testing net (#1)\n    Test net output #0: accuracy = 0.75\n";
  const TrainingLog log = ParseTrainingLog(text, "/some/dir/run.log");
  const Figure figure = TrainingFigure(log, PlotOptions{});
  ASSERT_EQ(figure.panels.size(), 4u);
  EXPECT_EQ(figure.title, "Training curves: run.log");
  const Panel& loss = figure.panels[kLossPanel];
  // 103 records: a window of 5; raw light, average dark, then the test loss.
  ASSERT_EQ(loss.series.size(), 3u);
  EXPECT_EQ(loss.series[0].color, kRawLossColor);
  EXPECT_EQ(loss.series[1].color, kSmoothedLossColor);
  EXPECT_EQ(loss.series[1].name, "moving average of 5");
  EXPECT_EQ(loss.series[2].name, "test loss");
  ASSERT_EQ(loss.notes.size(), 1u);
  EXPECT_EQ(loss.notes[0], "2 non-finite losses (nan/inf) not drawn");
  // Accuracy of both test nets, kept apart; the test loss is on the loss panel only.
  const Panel& test = figure.panels[kTestPanel];
  ASSERT_EQ(test.series.size(), 2u);
  EXPECT_EQ(test.series[0].name, "accuracy");
  EXPECT_EQ(test.series[0].x.size(), 5u);
  EXPECT_EQ(test.series[1].name, "#1 accuracy");
  EXPECT_FALSE(test.series[0].color == test.series[1].color);
  EXPECT_EQ(figure.panels[kRatePanel].series[0].y.size(), 103u);

  PlotOptions bad;
  bad.smooth = -1;
  EXPECT_THROW(TrainingFigure(log, bad), Error);
}

TEST(PlotTrainingTest, LogWithoutTimesOrTestsStillDraws) {
  const TrainingLog log = ParseTrainingLog("Iteration 0, loss = 2\n", "one.log");
  PlotOptions options;
  options.width = 600;
  options.height = 450;
  const RenderedFigure rendered = Render(TrainingFigure(log, options));
  EXPECT_FALSE(rendered.layouts[kLossPanel].empty);  // one point: a dot
  EXPECT_TRUE(rendered.layouts[kTimePanel].empty);
  EXPECT_TRUE(rendered.layouts[kRatePanel].empty);
  EXPECT_TRUE(rendered.layouts[kTestPanel].empty);
  const PanelLayout& l = rendered.layouts[kLossPanel];
  EXPECT_EQ(rendered.image.At(static_cast<int>(std::floor(l.x.ToPixel(0.0))),
                              static_cast<int>(std::floor(l.y.ToPixel(2.0)))),
            kSmoothedLossColor);
}

TEST(PlotTrainingTest, ErrorsNameTheSource) {
  try {
    PlotTrainingLog("nothing here\n", "job-7 driver log", PlotOptions{});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("job-7 driver log"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cortado::plot
