// SPDX-License-Identifier: Apache-2.0
// A small raster chart renderer: a figure of line-chart panels drawn into an RGB image (axes with
// 1-2-5 ticks, a light grid, titles, axis labels, legends, notes; anti-aliased lines), written as
// PNG with libpng. Text uses the bitmap font of font.hpp. Nothing here is thread-unsafe: every
// function works on its arguments only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cortado::plot {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb& o) const { return r == o.r && g == o.g && b == o.b; }
};

// An RGB raster: `width` x `height` pixels, row-major, 3 bytes per pixel, (0, 0) top left.
class Image {
 public:
  Image(int width, int height, Rgb background);

  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }
  Rgb At(int x, int y) const;
  // Mixes `color` into pixel (x, y) by `coverage` (0: unchanged, 1: replaced); outside the image
  // does nothing.
  void Blend(int x, int y, Rgb color, float coverage);
  // Fills the pixels x0 <= x < x1, y0 <= y < y1 (clipped to the image).
  void Fill(int x0, int y0, int x1, int y1, Rgb color);

 private:
  int width_;
  int height_;
  std::vector<uint8_t> pixels_;
};

// Axis ticks at round values: the step is 1, 2 or 5 times a power of ten, the smallest such step
// that is at least (hi - lo) / target (so there are at most about `target` intervals), and the
// range is widened outwards to multiples of the step. A degenerate range (lo == hi) is widened
// first (by 10% of |lo|, or by 1 around 0). lo <= hi, both finite; target >= 1.
struct Ticks {
  double lo = 0.0;             // first tick, <= the lo asked for
  double hi = 1.0;             // last tick, >= the hi asked for
  double step = 1.0;           // 1, 2 or 5 x 10^k
  std::vector<double> values;  // lo, lo + step, ..., hi
};
Ticks NiceTicks(double lo, double hi, int target);

// The label of tick `value` of a linear axis with tick spacing `step`: as many decimals as the
// step needs ("0.25", "1.5", "20"), thousands as "k" when the step is 1000 or more ("20k"),
// millions as "M" when the step is 100000 or more ("1.5M"), very small steps or very large
// values in exponent form ("1e-05").
std::string FormatTick(double value, double step);

// Maps data values to pixels along one axis: `lo` to `pixel_lo`, `hi` to `pixel_hi` (for a y
// axis pixel_lo is the lower pixel on screen, so the larger row number); linear, or in log10
// when `log` (lo, hi > 0).
struct Axis {
  double lo = 0.0, hi = 1.0;
  bool log = false;
  double pixel_lo = 0.0, pixel_hi = 1.0;
  double ToPixel(double value) const;
};

// One line of a panel. Points with a non-finite x or y are skipped (the line joins the points
// either side); a series of one point is drawn as a dot.
struct Series {
  std::string name;  // its legend entry; empty: not in the legend
  std::vector<double> x, y;
  Rgb color;
  float width = 2.0f;    // line width in pixels
  bool markers = false;  // also a dot at every point
};

struct Panel {
  std::string title;
  std::string x_label;
  std::string y_label;
  // Use a log10 y axis when every finite y is positive and they span more than a factor of 10.
  bool log_y_if_wide = false;
  std::vector<Series> series;
  std::vector<std::string> notes;  // lines under the title (e.g. points that were not drawn)
  std::string empty_text;          // shown in the middle when no series has a finite point
};

// Panels in a grid of `columns` columns, row by row, under a title.
struct Figure {
  int width = 1200;
  int height = 900;
  std::string title;
  int columns = 2;
  std::vector<Panel> panels;
};

// Where a panel was drawn: its plot area (the frame inside the axes, pixels left <= x < right,
// top <= y < bottom) and the mappings from data to pixels. A pixel column x shows data
// x.ToPixel(value) (rounded down).
struct PanelLayout {
  int left = 0, top = 0, right = 0, bottom = 0;
  Axis x, y;
  bool empty = false;  // nothing to draw: the axes are placeholders
};

struct RenderedFigure {
  Image image;
  std::vector<PanelLayout> layouts;  // one per panel, in order
};

// The text scale (1, 2, ...) a figure of this size uses, so text stays legible on large images.
int TextScale(int width, int height);

// Draws the figure. kInvalidArgument for a size below 200 x 150 or above 16384 on a side.
RenderedFigure Render(const Figure& figure);

// Text, at `scale` (each font pixel a scale x scale square), with its top-left corner at (x, y).
// `bold` draws every pixel twice, one pixel apart.
void DrawText(Image* image, int x, int y, const std::string& text, Rgb color, int scale,
              bool bold = false);
int TextWidth(const std::string& text, int scale);

// True when this build writes PNG (libpng found: WITH_IMAGES).
bool PngAvailable();
// The image as an 8-bit RGB PNG file. kUnimplemented in a build without PNG support.
std::string EncodePng(const Image& image);

}  // namespace cortado::plot
