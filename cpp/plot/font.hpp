// SPDX-License-Identifier: Apache-2.0
// A small bitmap font for the charts: printable ASCII (32 to 126), each glyph 5 pixels wide and
// 9 rows tall (rows 0-6 above the baseline, capitals filling them; rows 7-8 for descenders), set
// in a 6 x 11 cell. Drawn at an integer scale (chart.hpp DrawText).
#pragma once

#include <cstdint>

namespace cortado::plot {

constexpr int kGlyphWidth = 5;
constexpr int kGlyphRows = 9;
constexpr int kCellWidth = 6;    // advance from one character to the next
constexpr int kCellHeight = 11;  // line height

// The rows of `c`'s glyph, top first; in each row bit 4 is the leftmost pixel. Characters
// outside 32..126 get '?'.
const uint8_t* GlyphRows(char c);

}  // namespace cortado::plot
