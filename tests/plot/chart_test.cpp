// SPDX-License-Identifier: Apache-2.0
// The chart renderer: nice ticks and their labels, axis mappings, the font, lines drawn where
// the axes say, and PNG output read back with the project's decoder.
#include "plot/chart.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/error.hpp"
#include "data/image_codec.hpp"
#include "plot/font.hpp"

namespace cortado::plot {
namespace {

constexpr Rgb kRed{200, 0, 0};
constexpr Rgb kWhite{255, 255, 255};

void ExpectTicks(const Ticks& t, double lo, double hi, double step) {
  EXPECT_DOUBLE_EQ(t.lo, lo);
  EXPECT_DOUBLE_EQ(t.hi, hi);
  EXPECT_DOUBLE_EQ(t.step, step);
  ASSERT_EQ(t.values.size(), static_cast<size_t>(std::lround((hi - lo) / step)) + 1);
  for (size_t i = 0; i < t.values.size(); ++i) {
    EXPECT_NEAR(t.values[i], lo + static_cast<double>(i) * step, step * 1e-9) << i;
  }
}

TEST(PlotChartTest, NiceTicksUseStepsOfOneTwoFive) {
  ExpectTicks(NiceTicks(0, 10, 5), 0, 10, 2);
  ExpectTicks(NiceTicks(0.013, 0.97, 5), 0, 1, 0.2);
  ExpectTicks(NiceTicks(-3, 7.5, 4), -5, 10, 5);
  ExpectTicks(NiceTicks(0, 10000, 4), 0, 10000, 5000);  // 2500 rounds up to 5000
  ExpectTicks(NiceTicks(0.0001, 0.00093, 4), 0, 0.001, 0.0005);
  ExpectTicks(NiceTicks(120, 480, 8), 100, 500, 50);
  ExpectTicks(NiceTicks(10, 1, 9), 1, 10, 1);  // reversed bounds are swapped
  // A single value gets a range around it.
  ExpectTicks(NiceTicks(5, 5, 4), 4.5, 5.5, 0.5);
  ExpectTicks(NiceTicks(0, 0, 4), -1, 1, 0.5);
  // Zero is exactly zero, not -1.3e-17.
  const Ticks t = NiceTicks(-0.3, 0.3, 6);
  EXPECT_EQ(t.values[3], 0.0);
}

TEST(PlotChartTest, TickLabels) {
  EXPECT_EQ(FormatTick(0, 1), "0");
  EXPECT_EQ(FormatTick(3, 1), "3");
  EXPECT_EQ(FormatTick(0.25, 0.05), "0.25");
  EXPECT_EQ(FormatTick(0.4, 0.2), "0.4");
  EXPECT_EQ(FormatTick(1.5, 0.5), "1.5");
  EXPECT_EQ(FormatTick(150, 50), "150");
  EXPECT_EQ(FormatTick(20000, 5000), "20k");
  EXPECT_EQ(FormatTick(1500000, 500000), "1.5M");
  EXPECT_EQ(FormatTick(500000, 500000), "500k");
  EXPECT_EQ(FormatTick(3000000, 1000000), "3M");
  EXPECT_EQ(FormatTick(-2, 1), "-2");
  EXPECT_EQ(FormatTick(3e-6, 1e-6), "3e-06");
}

TEST(PlotChartTest, AxisMapsLinearlyOrInLogTen) {
  Axis x{0, 100, false, 10, 110};
  EXPECT_DOUBLE_EQ(x.ToPixel(0), 10);
  EXPECT_DOUBLE_EQ(x.ToPixel(50), 60);
  EXPECT_DOUBLE_EQ(x.ToPixel(100), 110);
  Axis y{1e-4, 1e-1, true, 400, 100};  // 3 decades over 300 pixels, upwards
  EXPECT_DOUBLE_EQ(y.ToPixel(1e-4), 400);
  EXPECT_NEAR(y.ToPixel(1e-3), 300, 1e-9);
  EXPECT_NEAR(y.ToPixel(1e-1), 100, 1e-9);
}

TEST(PlotChartTest, FontHasAGlyphForEveryPrintableCharacter) {
  std::set<std::vector<uint8_t>> shapes;
  for (int c = 33; c <= 126; ++c) {
    const uint8_t* rows = GlyphRows(static_cast<char>(c));
    int ink = 0;
    for (int r = 0; r < kGlyphRows; ++r) {
      EXPECT_EQ(rows[r] >> kGlyphWidth, 0) << "'" << static_cast<char>(c) << "' row " << r;
      ink += rows[r] != 0;
    }
    EXPECT_GT(ink, 0) << "'" << static_cast<char>(c) << "' is blank";
    shapes.insert(std::vector<uint8_t>(rows, rows + kGlyphRows));
  }
  EXPECT_EQ(shapes.size(), 94u) << "two characters share a glyph";
  for (int r = 0; r < kGlyphRows; ++r) EXPECT_EQ(GlyphRows(' ')[r], 0);
  EXPECT_EQ(GlyphRows('\x01'), GlyphRows('?'));
  EXPECT_EQ(GlyphRows('\xe9'), GlyphRows('?'));
}

TEST(PlotChartTest, TextIsDrawnInsideItsBox) {
  Image image(100, 40, kWhite);
  DrawText(&image, 10, 5, "Hi", kRed, 2);
  EXPECT_EQ(TextWidth("Hi", 2), (2 * kCellWidth - 1) * 2);
  int inside = 0, outside = 0;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) {
      if (image.At(x, y) == kWhite) continue;
      const bool in_box =
          x >= 10 && x < 10 + TextWidth("Hi", 2) && y >= 5 && y < 5 + kGlyphRows * 2;
      (in_box ? inside : outside)++;
    }
  }
  EXPECT_GT(inside, 20);
  EXPECT_EQ(outside, 0);
  // 'H' starts with a full column of pixels: its left edge at the top.
  EXPECT_EQ(image.At(10, 5), kRed);
  EXPECT_EQ(image.At(11, 6), kRed);
}

Figure LineFigure() {
  Figure figure;
  figure.width = 400;
  figure.height = 300;
  figure.columns = 1;
  Panel panel;
  panel.title = "y = 2x + 1";
  panel.x_label = "x";
  panel.y_label = "y";
  Series line{"line", {}, {}, kRed, 3.0f, false};
  for (int i = 0; i <= 10; ++i) {
    line.x.push_back(i);
    line.y.push_back(2.0 * i + 1.0);
  }
  panel.series.push_back(line);
  figure.panels.push_back(panel);
  return figure;
}

TEST(PlotChartTest, LinesAreDrawnWhereTheAxesMapThem) {
  const RenderedFigure rendered = Render(LineFigure());
  ASSERT_EQ(rendered.layouts.size(), 1u);
  const PanelLayout& layout = rendered.layouts[0];
  EXPECT_FALSE(layout.empty);
  EXPECT_FALSE(layout.y.log);
  // The axes hold the data, on tick values.
  EXPECT_LE(layout.x.lo, 0.0);
  EXPECT_GE(layout.x.hi, 10.0);
  EXPECT_LE(layout.y.lo, 1.0);
  EXPECT_GE(layout.y.hi, 21.0);
  for (double x : {0.5, 2.25, 5.0, 7.75, 9.5}) {
    const double y = 2.0 * x + 1.0;
    const int px = static_cast<int>(std::floor(layout.x.ToPixel(x)));
    const int py = static_cast<int>(std::floor(layout.y.ToPixel(y)));
    EXPECT_EQ(rendered.image.At(px, py), kRed) << "x = " << x << " at (" << px << ", " << py << ")";
    // Well away from the line: not the line's colour.
    const int off = static_cast<int>(std::floor(layout.y.ToPixel(y + 6.0)));
    EXPECT_FALSE(rendered.image.At(px, off) == kRed) << "x = " << x;
  }
}

TEST(PlotChartTest, WideLogRangeGetsALogAxisAndASinglePointADot) {
  Figure figure = LineFigure();
  Series& s = figure.panels[0].series[0];
  s.y = {0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.0001, 0.0001, 0.0001, 0.0001, 0.0001};
  figure.panels[0].log_y_if_wide = true;
  Panel dot;
  dot.series.push_back(Series{"", {3.0}, {7.0}, kRed, 2.0f, false});
  figure.panels.push_back(dot);
  const RenderedFigure rendered = Render(figure);
  EXPECT_TRUE(rendered.layouts[0].y.log);
  EXPECT_DOUBLE_EQ(rendered.layouts[0].y.lo, 1e-4);
  EXPECT_DOUBLE_EQ(rendered.layouts[0].y.hi, 0.1);
  const PanelLayout& d = rendered.layouts[1];
  EXPECT_FALSE(d.empty);
  EXPECT_EQ(rendered.image.At(static_cast<int>(std::floor(d.x.ToPixel(3.0))),
                              static_cast<int>(std::floor(d.y.ToPixel(7.0)))),
            kRed);
}

TEST(PlotChartTest, PanelWithoutFinitePointsIsEmpty) {
  Figure figure = LineFigure();
  figure.panels[0].series[0].y.assign(11, NAN);
  const RenderedFigure rendered = Render(figure);
  EXPECT_TRUE(rendered.layouts[0].empty);
  for (int y = 0; y < rendered.image.height(); ++y) {
    for (int x = 0; x < rendered.image.width(); ++x) {
      ASSERT_FALSE(rendered.image.At(x, y) == kRed) << x << ", " << y;
    }
  }
}

TEST(PlotChartTest, SizeOutOfRangeIsRefused) {
  Figure figure = LineFigure();
  figure.width = 100;
  EXPECT_THROW(Render(figure), Error);
  figure.width = 400;
  figure.height = 20000;
  EXPECT_THROW(Render(figure), Error);
}

TEST(PlotChartTest, PngReadsBackAsTheImage) {
  const RenderedFigure rendered = Render(LineFigure());
  if (!PngAvailable()) {
    EXPECT_THROW(EncodePng(rendered.image), Error);
    GTEST_SKIP() << "no PNG support in this build";
  }
  const std::string png = EncodePng(rendered.image);
  const DecodedImage decoded = DecodeImage(png.data(), png.size(), ColorMode::kColor, "chart");
  ASSERT_EQ(decoded.width, 400);
  ASSERT_EQ(decoded.height, 300);
  ASSERT_EQ(decoded.channels, 3);
  // Planar B, G, R against the RGB image: every pixel.
  const size_t plane = static_cast<size_t>(decoded.width) * decoded.height;
  size_t differing = 0;
  for (int y = 0; y < decoded.height; ++y) {
    for (int x = 0; x < decoded.width; ++x) {
      const size_t i = static_cast<size_t>(y) * decoded.width + x;
      const Rgb p = rendered.image.At(x, y);
      differing += decoded.pixels[2 * plane + i] != p.r || decoded.pixels[plane + i] != p.g ||
                   decoded.pixels[i] != p.b;
    }
  }
  EXPECT_EQ(differing, 0u);
}

}  // namespace
}  // namespace cortado::plot
