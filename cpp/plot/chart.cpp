// SPDX-License-Identifier: Apache-2.0
#include "plot/chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/config.hpp"
#include "core/error.hpp"
#include "plot/font.hpp"

#if CORTADO_WITH_IMAGES
#include <png.h>

#include <csetjmp>
#include <cstdio>
#endif

namespace cortado::plot {
namespace {

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kText{34, 34, 34};
constexpr Rgb kMutedText{120, 120, 120};
constexpr Rgb kNoteText{178, 24, 43};
constexpr Rgb kGrid{230, 230, 230};
constexpr Rgb kFrame{90, 90, 90};
constexpr Rgb kLegendBorder{200, 200, 200};

// Lines stay this many pixels inside the frame, so that a curve at the edge of its range does
// not hide under the frame.
constexpr int kInset = 6;

bool Finite(double v) { return std::isfinite(v); }

}  // namespace

// ---- Image -----------------------------------------------------------------------------------

Image::Image(int width, int height, Rgb background)
    : width_(width), height_(height), pixels_(static_cast<size_t>(width) * height * 3) {
  CORTADO_CHECK(width > 0 && height > 0, "image size {}x{}", width, height);
  Fill(0, 0, width, height, background);
}

Rgb Image::At(int x, int y) const {
  CORTADO_CHECK(x >= 0 && x < width_ && y >= 0 && y < height_, "pixel ({}, {}) outside {}x{}", x, y,
                width_, height_);
  const uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
  return Rgb{p[0], p[1], p[2]};
}

void Image::Blend(int x, int y, Rgb color, float coverage) {
  if (x < 0 || x >= width_ || y < 0 || y >= height_ || coverage <= 0.0f) return;
  const float a = std::min(coverage, 1.0f);
  uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
  const uint8_t c[3] = {color.r, color.g, color.b};
  for (int i = 0; i < 3; ++i) {
    p[i] = static_cast<uint8_t>(std::lround(p[i] + (c[i] - p[i]) * a));
  }
}

void Image::Fill(int x0, int y0, int x1, int y1, Rgb color) {
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, width_);
  y1 = std::min(y1, height_);
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) {
      uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
      p[0] = color.r;
      p[1] = color.g;
      p[2] = color.b;
    }
  }
}

// ---- Ticks -----------------------------------------------------------------------------------

Ticks NiceTicks(double lo, double hi, int target) {
  CORTADO_CHECK(Finite(lo) && Finite(hi), "tick range {} to {}", lo, hi);
  if (lo > hi) std::swap(lo, hi);
  if (lo == hi) {
    const double d = lo == 0.0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
  target = std::max(target, 1);
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10.0 * magnitude;
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * magnitude >= raw * (1.0 - 1e-9)) {
      step = m * magnitude;
      break;
    }
  }
  Ticks ticks;
  ticks.step = step;
  const double first = std::floor(lo / step + 1e-9);
  const double last = std::ceil(hi / step - 1e-9);
  ticks.lo = first * step;
  ticks.hi = last * step;
  const int n = static_cast<int>(std::lround(last - first));
  for (int k = 0; k <= n; ++k) {
    // (first + k) * step, not lo + k * step: no drift, and 0 comes out as 0.
    double v = (first + k) * step;
    if (std::fabs(v) < step * 1e-9) v = 0.0;
    ticks.values.push_back(v);
  }
  return ticks;
}

std::string FormatTick(double value, double step) {
  if (value == 0.0) return "0";
  step = std::fabs(step);
  const auto fixed = [](double v, double s) {
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(s) + 1e-9)));
    return fmt::format("{:.{}f}", v, decimals);
  };
  if (step >= 1e5 && std::fabs(value) >= 1e6) return fixed(value / 1e6, step / 1e6) + "M";
  if (step >= 1e3 && std::fabs(value) >= 1e3) return fixed(value / 1e3, step / 1e3) + "k";
  if (step < 1e-4 || std::fabs(value) >= 1e9) return fmt::format("{:g}", value);
  return fixed(value, step);
}

double Axis::ToPixel(double value) const {
  double t = 0.0;
  if (log) {
    t = (std::log10(value) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  } else {
    t = (value - lo) / (hi - lo);
  }
  return pixel_lo + t * (pixel_hi - pixel_lo);
}

// ---- Text ------------------------------------------------------------------------------------

int TextWidth(const std::string& text, int scale) {
  return text.empty() ? 0 : (static_cast<int>(text.size()) * kCellWidth - 1) * scale;
}

void DrawText(Image* image, int x, int y, const std::string& text, Rgb color, int scale,
              bool bold) {
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t* rows = GlyphRows(text[i]);
    const int gx = x + static_cast<int>(i) * kCellWidth * scale;
    for (int r = 0; r < kGlyphRows; ++r) {
      for (int c = 0; c < kGlyphWidth; ++c) {
        if ((rows[r] >> (kGlyphWidth - 1 - c) & 1) == 0) continue;
        const int px = gx + c * scale, py = y + r * scale;
        image->Fill(px, py, px + scale + (bold ? 1 : 0), py + scale, color);
      }
    }
  }
}

namespace {

// Text turned a quarter left (read from bottom to top), its first character's bottom-left corner
// at (x, y): for the y axis label.
void DrawTextUp(Image* image, int x, int y, const std::string& text, Rgb color, int scale) {
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t* rows = GlyphRows(text[i]);
    const int along = static_cast<int>(i) * kCellWidth;
    for (int r = 0; r < kGlyphRows; ++r) {
      for (int c = 0; c < kGlyphWidth; ++c) {
        if ((rows[r] >> (kGlyphWidth - 1 - c) & 1) == 0) continue;
        const int px = x + r * scale, py = y - (along + c + 1) * scale;
        image->Fill(px, py, px + scale, py + scale, color);
      }
    }
  }
}

// ---- Lines -----------------------------------------------------------------------------------

// Coverage of one series over a rectangle of the image, so that where its segments overlap (at
// every joint) a pixel is painted once, with the largest coverage, not darkened twice.
class CoverageMask {
 public:
  CoverageMask(int left, int top, int right, int bottom)
      : left_(left),
        top_(top),
        width_(std::max(right - left, 0)),
        height_(std::max(bottom - top, 0)),
        coverage_(static_cast<size_t>(width_) * height_, 0.0f) {}

  // A segment of width `width` with round ends (a dot when both ends are the same point).
  void Segment(double x0, double y0, double x1, double y1, double width) {
    const double half = width / 2.0;
    const int bx0 = std::max(0, static_cast<int>(std::floor(std::min(x0, x1) - half - 1)) - left_);
    const int bx1 =
        std::min(width_, static_cast<int>(std::ceil(std::max(x0, x1) + half + 1)) - left_);
    const int by0 = std::max(0, static_cast<int>(std::floor(std::min(y0, y1) - half - 1)) - top_);
    const int by1 =
        std::min(height_, static_cast<int>(std::ceil(std::max(y0, y1) + half + 1)) - top_);
    const double dx = x1 - x0, dy = y1 - y0;
    const double length2 = dx * dx + dy * dy;
    for (int y = by0; y < by1; ++y) {
      const double cy = top_ + y + 0.5;
      for (int x = bx0; x < bx1; ++x) {
        const double cx = left_ + x + 0.5;
        double t = length2 > 0.0 ? ((cx - x0) * dx + (cy - y0) * dy) / length2 : 0.0;
        t = std::clamp(t, 0.0, 1.0);
        const double ex = x0 + t * dx - cx, ey = y0 + t * dy - cy;
        // The fraction of the pixel inside the stroke, approximated from the distance of its
        // centre to the stroke's middle line.
        const float c =
            static_cast<float>(std::clamp(half + 0.5 - std::sqrt(ex * ex + ey * ey), 0.0, 1.0));
        float& slot = coverage_[static_cast<size_t>(y) * width_ + x];
        slot = std::max(slot, c);
      }
    }
  }

  void PaintInto(Image* image, Rgb color) const {
    for (int y = 0; y < height_; ++y) {
      for (int x = 0; x < width_; ++x) {
        const float c = coverage_[static_cast<size_t>(y) * width_ + x];
        if (c > 0.0f) image->Blend(left_ + x, top_ + y, color, c);
      }
    }
  }

 private:
  int left_, top_, width_, height_;
  std::vector<float> coverage_;
};

void DrawSeries(Image* image, const PanelLayout& layout, const Series& series) {
  CoverageMask mask(layout.left + 1, layout.top + 1, layout.right - 1, layout.bottom - 1);
  std::vector<std::pair<double, double>> points;
  const size_t n = std::min(series.x.size(), series.y.size());
  for (size_t i = 0; i < n; ++i) {
    const double x = series.x[i], y = series.y[i];
    if (!Finite(x) || !Finite(y) || (layout.y.log && y <= 0.0)) continue;
    points.emplace_back(layout.x.ToPixel(x), layout.y.ToPixel(y));
  }
  const double dot = std::max<double>(series.width * 2.2, 5.0);
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& [x, y] = points[i];
    if (i + 1 < points.size()) {
      mask.Segment(x, y, points[i + 1].first, points[i + 1].second, series.width);
    }
    if (series.markers || points.size() == 1) mask.Segment(x, y, x, y, dot);
  }
  mask.PaintInto(image, series.color);
}

void HorizontalLine(Image* image, int x0, int x1, int y, Rgb color) {
  image->Fill(x0, y, x1, y + 1, color);
}
void VerticalLine(Image* image, int x, int y0, int y1, Rgb color) {
  image->Fill(x, y0, x + 1, y1, color);
}

// ---- Axes ------------------------------------------------------------------------------------

struct AxisTicks {
  Axis axis;
  std::vector<double> values;
  std::vector<std::string> labels;
};

AxisTicks LinearTicks(double lo, double hi, int target) {
  const Ticks ticks = NiceTicks(lo, hi, target);
  AxisTicks out;
  out.axis.lo = ticks.lo;
  out.axis.hi = ticks.hi;
  out.values = ticks.values;
  for (double v : ticks.values) out.labels.push_back(FormatTick(v, ticks.step));
  return out;
}

std::string PowerOfTenLabel(int exponent, int mantissa) {
  if (exponent >= -4 && exponent <= 5) {
    return FormatTick(mantissa * std::pow(10.0, exponent), std::pow(10.0, exponent));
  }
  return fmt::format("{}e{}", mantissa, exponent);
}

// Ticks at powers of ten (and at 2 and 5 times them when the range spans at most two decades).
AxisTicks LogTicks(double lo, double hi) {
  const int e0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int e1 = std::max(static_cast<int>(std::ceil(std::log10(hi) - 1e-9)), e0 + 1);
  AxisTicks out;
  out.axis.log = true;
  out.axis.lo = std::pow(10.0, e0);
  out.axis.hi = std::pow(10.0, e1);
  const int every = std::max(1, (e1 - e0 + 7) / 8);
  for (int e = e0; e <= e1; e += every) {
    out.values.push_back(std::pow(10.0, e));
    out.labels.push_back(PowerOfTenLabel(e, 1));
    if (e1 - e0 <= 2 && e < e1) {
      for (int m : {2, 5}) {
        out.values.push_back(m * std::pow(10.0, e));
        out.labels.push_back(PowerOfTenLabel(e, m));
      }
    }
  }
  return out;
}

struct Rect {
  int left, top, right, bottom;
};

// How much of the series' lines and points would fall under `r` (grown by `grow` pixels): the
// points, and samples every few pixels along each segment.
int CountPointsIn(const Panel& panel, const PanelLayout& layout, const Rect& r, double grow) {
  const auto inside = [&](double px, double py) {
    return px >= r.left - grow && px < r.right + grow && py >= r.top - grow && py < r.bottom + grow;
  };
  int count = 0;
  for (const Series& s : panel.series) {
    const size_t n = std::min(s.x.size(), s.y.size());
    bool have_last = false;
    double last_x = 0.0, last_y = 0.0;
    for (size_t i = 0; i < n; ++i) {
      if (!Finite(s.x[i]) || !Finite(s.y[i]) || (layout.y.log && s.y[i] <= 0.0)) continue;
      const double px = layout.x.ToPixel(s.x[i]), py = layout.y.ToPixel(s.y[i]);
      if (inside(px, py)) ++count;
      if (have_last) {
        const int steps = static_cast<int>(std::hypot(px - last_x, py - last_y) / 3.0);
        for (int k = 1; k < steps; ++k) {
          const double t = static_cast<double>(k) / steps;
          if (inside(last_x + t * (px - last_x), last_y + t * (py - last_y))) ++count;
        }
      }
      have_last = true;
      last_x = px;
      last_y = py;
    }
  }
  return count;
}

// The legend goes in the corner of the plot area that covers the fewest points.
void DrawLegend(Image* image, const Panel& panel, const PanelLayout& layout, int scale) {
  std::vector<const Series*> entries;
  int text_width = 0;
  for (const Series& s : panel.series) {
    if (s.name.empty()) continue;
    entries.push_back(&s);
    text_width = std::max(text_width, TextWidth(s.name, scale));
  }
  if (entries.empty()) return;
  const int pad = 4 * scale, sample = 12 * scale, row = (kCellHeight + 2) * scale;
  const int w = pad + sample + pad + text_width + pad;
  const int h = pad + static_cast<int>(entries.size()) * row + pad / 2;
  const int margin = kInset + 2;
  const Rect corners[] = {
      {layout.right - margin - w, layout.top + margin, layout.right - margin,
       layout.top + margin + h},
      {layout.left + margin, layout.top + margin, layout.left + margin + w,
       layout.top + margin + h},
      {layout.right - margin - w, layout.bottom - margin - h, layout.right - margin,
       layout.bottom - margin},
      {layout.left + margin, layout.bottom - margin - h, layout.left + margin + w,
       layout.bottom - margin},
  };
  Rect best = corners[0];
  int best_count = -1;
  for (const Rect& r : corners) {
    const int count = CountPointsIn(panel, layout, r, 3.0 * scale);
    if (best_count < 0 || count < best_count) {
      best = r;
      best_count = count;
    }
  }
  image->Fill(best.left, best.top, best.right, best.bottom, kWhite);
  HorizontalLine(image, best.left, best.right, best.top, kLegendBorder);
  HorizontalLine(image, best.left, best.right, best.bottom - 1, kLegendBorder);
  VerticalLine(image, best.left, best.top, best.bottom, kLegendBorder);
  VerticalLine(image, best.right - 1, best.top, best.bottom, kLegendBorder);
  for (size_t i = 0; i < entries.size(); ++i) {
    const int y = best.top + pad + static_cast<int>(i) * row;
    const double mid = y + kGlyphRows * scale / 2.0 - 1;
    CoverageMask mask(best.left + 1, best.top + 1, best.right - 1, best.bottom - 1);
    const double x0 = best.left + pad, x1 = best.left + pad + sample;
    mask.Segment(x0, mid, x1, mid, std::max(entries[i]->width, 2.0f));
    if (entries[i]->markers) mask.Segment((x0 + x1) / 2, mid, (x0 + x1) / 2, mid, 5.0 * scale);
    mask.PaintInto(image, entries[i]->color);
    DrawText(image, best.left + pad + sample + pad, y, entries[i]->name, kText, scale);
  }
}

PanelLayout DrawPanel(Image* image, const Panel& panel, const Rect& cell, int scale) {
  const int pad = 6 * scale;
  const int line = kCellHeight * scale;
  const int tick = 4 * scale;
  // The data's range.
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  bool all_positive = true;
  for (const Series& s : panel.series) {
    const size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (!Finite(s.x[i]) || !Finite(s.y[i])) continue;
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
      all_positive = all_positive && s.y[i] > 0.0;
    }
  }
  PanelLayout layout;
  layout.empty = !(x_lo <= x_hi);
  if (layout.empty) x_lo = x_hi = y_lo = y_hi = 0.0;
  const int title_height = line + static_cast<int>(panel.notes.size()) * line;
  const int plot_height_guess = cell.bottom - cell.top - title_height - 3 * line - 3 * pad;
  const int plot_width_guess = cell.right - cell.left - 2 * line - 6 * pad;
  AxisTicks xt = LinearTicks(x_lo, x_hi, std::max(2, plot_width_guess / (60 * scale)));
  AxisTicks yt = panel.log_y_if_wide && all_positive && !layout.empty && y_hi > 10.0 * y_lo
                     ? LogTicks(y_lo, y_hi)
                     : LinearTicks(y_lo, y_hi, std::clamp(plot_height_guess / (30 * scale), 2, 8));
  if (layout.empty) {
    xt.labels.assign(xt.values.size(), "");
    yt.labels.assign(yt.values.size(), "");
  }
  int label_width = 0;
  for (const auto& label : yt.labels) label_width = std::max(label_width, TextWidth(label, scale));
  const int last_x_label = xt.labels.empty() ? 0 : TextWidth(xt.labels.back(), scale);

  layout.left = cell.left + pad + line + pad / 2 + label_width + tick + 2 * scale;
  layout.right = cell.right - pad - std::max(pad, last_x_label / 2);
  layout.top = cell.top + pad + title_height + pad / 2;
  layout.bottom = cell.bottom - pad - line - pad / 2 - line - tick;
  layout.x = xt.axis;
  layout.y.lo = yt.axis.lo;
  layout.y.hi = yt.axis.hi;
  layout.y.log = yt.axis.log;
  layout.x.pixel_lo = layout.left + kInset;
  layout.x.pixel_hi = layout.right - kInset;
  layout.y.pixel_lo = layout.bottom - kInset;
  layout.y.pixel_hi = layout.top + kInset;

  // Title (centred over the plot area) and notes.
  const int title_width = TextWidth(panel.title, scale);
  const int title_x = std::max(cell.left + pad, (layout.left + layout.right - title_width) / 2);
  DrawText(image, title_x, cell.top + pad, panel.title, kText, scale, true);
  for (size_t i = 0; i < panel.notes.size(); ++i) {
    DrawText(image, layout.left, cell.top + pad + line * static_cast<int>(i + 1), panel.notes[i],
             kNoteText, scale);
  }
  // Grid, frame, ticks and their labels.
  for (size_t i = 0; i < xt.values.size(); ++i) {
    const int x = static_cast<int>(std::floor(layout.x.ToPixel(xt.values[i])));
    VerticalLine(image, x, layout.top, layout.bottom, kGrid);
    VerticalLine(image, x, layout.bottom, layout.bottom + tick, kFrame);
    DrawText(image, x - TextWidth(xt.labels[i], scale) / 2, layout.bottom + tick + 2 * scale,
             xt.labels[i], kText, scale);
  }
  for (size_t i = 0; i < yt.values.size(); ++i) {
    const int y = static_cast<int>(std::floor(layout.y.ToPixel(yt.values[i])));
    HorizontalLine(image, layout.left, layout.right, y, kGrid);
    HorizontalLine(image, layout.left - tick, layout.left, y, kFrame);
    DrawText(image, layout.left - tick - 2 * scale - TextWidth(yt.labels[i], scale),
             y - kGlyphRows * scale / 2 + scale, yt.labels[i], kText, scale);
  }
  HorizontalLine(image, layout.left, layout.right, layout.top, kFrame);
  HorizontalLine(image, layout.left, layout.right, layout.bottom - 1, kFrame);
  VerticalLine(image, layout.left, layout.top, layout.bottom, kFrame);
  VerticalLine(image, layout.right - 1, layout.top, layout.bottom, kFrame);
  // Axis labels.
  DrawText(image, (layout.left + layout.right - TextWidth(panel.x_label, scale)) / 2,
           cell.bottom - pad - line, panel.x_label, kText, scale);
  DrawTextUp(image, cell.left + pad,
             (layout.top + layout.bottom + TextWidth(panel.y_label, scale)) / 2, panel.y_label,
             kText, scale);

  if (layout.empty) {
    const std::string& text = panel.empty_text.empty() ? "no data" : panel.empty_text;
    DrawText(image, (layout.left + layout.right - TextWidth(text, scale)) / 2,
             (layout.top + layout.bottom - line) / 2, text, kMutedText, scale);
    return layout;
  }
  for (const Series& s : panel.series) DrawSeries(image, layout, s);
  DrawLegend(image, panel, layout, scale);
  return layout;
}

}  // namespace

int TextScale(int width, int height) { return std::max(1, std::min(width / 600, height / 450)); }

RenderedFigure Render(const Figure& figure) {
  if (figure.width < 200 || figure.height < 150 || figure.width > 16384 || figure.height > 16384) {
    CORTADO_THROW(kInvalidArgument,
                  "a chart of {}x{} pixels: the size must be from 200x150 to 16384x16384",
                  figure.width, figure.height);
  }
  RenderedFigure out{Image(figure.width, figure.height, kWhite), {}};
  const int scale = TextScale(figure.width, figure.height);
  int top = 0;
  if (!figure.title.empty()) {
    const int pad = 6 * scale;
    DrawText(&out.image, std::max(pad, (figure.width - TextWidth(figure.title, scale)) / 2), pad,
             figure.title, kText, scale, true);
    top = pad + kCellHeight * scale;
  }
  const int columns = std::max(1, figure.columns);
  const int count = static_cast<int>(figure.panels.size());
  const int rows = std::max(1, (count + columns - 1) / columns);
  for (int i = 0; i < count; ++i) {
    const int r = i / columns, c = i % columns;
    const Rect cell{figure.width * c / columns, top + (figure.height - top) * r / rows,
                    figure.width * (c + 1) / columns, top + (figure.height - top) * (r + 1) / rows};
    out.layouts.push_back(
        DrawPanel(&out.image, figure.panels[static_cast<size_t>(i)], cell, scale));
  }
  return out;
}

// ---- PNG -------------------------------------------------------------------------------------

#if CORTADO_WITH_IMAGES
namespace {

// Owns libpng's writer and the output; its destructor frees the writer however writing ended.
struct PngWriter {
  PngWriter() { message[0] = '\0'; }
  ~PngWriter() { png_destroy_write_struct(&png, info != nullptr ? &info : nullptr); }
  PngWriter(const PngWriter&) = delete;
  PngWriter& operator=(const PngWriter&) = delete;

  static void OnError(png_structp png, png_const_charp text) {
    auto* w = static_cast<PngWriter*>(png_get_error_ptr(png));
    std::snprintf(w->message, sizeof(w->message), "%s", text);
    png_longjmp(png, 1);
  }
  static void OnWarning(png_structp /*png*/, png_const_charp /*text*/) {}
  static void OnWrite(png_structp png, png_bytep data, png_size_t n) {
    static_cast<PngWriter*>(png_get_io_ptr(png))->bytes.append(reinterpret_cast<char*>(data), n);
  }
  static void OnFlush(png_structp /*png*/) {}

  png_structp png = nullptr;
  png_infop info = nullptr;
  std::string bytes;
  char message[256];
};

// Only C calls between setjmp and the longjmp an error makes. False on error (message set).
bool PngWriteRows(PngWriter* w, int width, int height, png_bytepp rows) {
  if (setjmp(png_jmpbuf(w->png)) != 0) return false;
  png_set_write_fn(w->png, w, PngWriter::OnWrite, PngWriter::OnFlush);
  png_set_IHDR(w->png, w->info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height),
               8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(w->png, w->info);
  png_write_image(w->png, rows);
  png_write_end(w->png, nullptr);
  return true;
}

}  // namespace

bool PngAvailable() { return true; }

std::string EncodePng(const Image& image) {
  PngWriter w;
  w.png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, PngWriter::OnError, PngWriter::OnWarning);
  if (w.png != nullptr) w.info = png_create_info_struct(w.png);
  if (w.png == nullptr || w.info == nullptr) {
    CORTADO_THROW(kOutOfMemory, "libpng could not allocate its encoder");
  }
  std::vector<png_bytep> rows(static_cast<size_t>(image.height()));
  for (int y = 0; y < image.height(); ++y) {
    // libpng only reads the rows; its API is not const-correct.
    rows[static_cast<size_t>(y)] =
        const_cast<png_bytep>(image.pixels().data() + static_cast<size_t>(y) * image.width() * 3);
  }
  if (!PngWriteRows(&w, image.width(), image.height(), rows.data())) {
    CORTADO_THROW(kInternal, "libpng could not write a {}x{} PNG: {}", image.width(),
                  image.height(), w.message);
  }
  return std::move(w.bytes);
}
#else
bool PngAvailable() { return false; }

std::string EncodePng(const Image& image) {
  CORTADO_THROW(kUnimplemented,
                "cannot write a {}x{} PNG: this build has no PNG support (configure with "
                "WITH_IMAGES=ON and libpng installed)",
                image.width(), image.height());
}
#endif

}  // namespace cortado::plot
