// SPDX-License-Identifier: Apache-2.0
// JPEG and PNG decoding (libjpeg-turbo, libpng) and bilinear resizing, for encoded datums
// (`encoded: true`, what Caffe's `convert_imageset --encoded` writes) and for images that reach
// the feed layers from Spark.
//
// A decoded image is planar: channels x height x width uint8, as a raw caffe::Datum holds it, in
// Caffe's channel order: B, G, R for color (what Caffe gets from OpenCV's imdecode), one plane
// for gray. The format is told by the first bytes (JPEG FF D8 FF, PNG's 8-byte signature), not
// by a file name.
//
// PNG decodes as OpenCV's decoder does, with libpng's transforms: a palette expands to color,
// gray of 1, 2 or 4 bits to 8, 16-bit samples keep their high byte (png_set_strip_16, as OpenCV;
// v16 >> 8), and alpha (an alpha channel or a tRNS chunk) is dropped, not composited. The file's
// gamma and color profile are ignored, as OpenCV does.
//
// Differences from OpenCV (so from Caffe), all in the last bit or in what counts as an error:
// - Color to gray (force_gray on a color PNG) is Y = 0.299 R + 0.587 G + 0.114 B rounded to
//   nearest; OpenCV lets libpng convert with its fixed-point weights, whose rounding may differ
//   by 1. A color JPEG forced to gray is libjpeg's luma, as in OpenCV.
// - Resizing computes in float; OpenCV's fixed-point INTER_LINEAR may differ by 1.
// - A JPEG that libjpeg warns about (truncated: "Premature end of JPEG file", or corrupt data it
//   would work around) is an error here; OpenCV prints the warning and returns the image with the
//   missing part filled with gray.
//
// All functions are thread-safe (no shared state) and never abort the process: every failure of
// the C libraries is caught and thrown as cortado::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cortado {

// The channels wanted, as Caffe's TransformationParameter force_color / force_gray choose them.
enum class ColorMode {
  kKeep,   // gray stays 1 channel, color (and palette) gives 3, alpha dropped: IMREAD_ANYCOLOR
  kColor,  // 3 channels, gray replicated into B, G and R (force_color)
  kGray,   // 1 channel (force_gray)
};

// Pixels of one image, owned: `pixels` holds channels x height x width bytes, plane after plane,
// each plane row-major (B, G, R planes for color).
struct DecodedImage {
  int channels = 0;
  int height = 0;
  int width = 0;
  std::vector<uint8_t> pixels;
};

// True when this build decodes images (libjpeg and libpng were found: WITH_IMAGES).
bool ImageCodecsAvailable();

// True when `bytes` start with the JPEG or the PNG signature (nothing else is checked).
bool LooksLikeEncodedImage(const void* bytes, size_t size);

// Decodes the `size` bytes of a JPEG or PNG file at `bytes` into the channels `mode` asks for.
// Every failure throws cortado::Error whose message starts with `what` (the caller's name for
// the image: "layer 'data' (Data): record 'k' of LMDB database 'p'", a path) and says what is
// wrong:
// - kParse: no data, bytes that are neither JPEG nor PNG ("not a JPEG or PNG image (first bytes
//   ff 00 12 34, ...)"), or a corrupt or truncated file ("corrupt JPEG data: <libjpeg's
//   message>", "corrupt PNG data: <libpng's message>"); a libjpeg warning counts as corruption;
// - kInvalidArgument: an image this decoder refuses (a CMYK or other non-gray, non-color JPEG; a
//   side over 32768 pixels or more than 2^28 pixels);
// - kUnimplemented: a JPEG or PNG in a build without the codecs (WITH_IMAGES=OFF).
DecodedImage DecodeImage(const void* bytes, size_t size, ColorMode mode, const std::string& what);

// `image` resized to `height` x `width` by bilinear interpolation with OpenCV's INTER_LINEAR
// conventions, plane by plane: along each axis the source coordinate of output index d is
// s = (d + 0.5) * in / out - 0.5; the taps are floor(s) and floor(s) + 1 with weights 1 - f and
// f (f = s - floor(s)), clamped at the borders (s < 0 takes pixel 0, s >= in - 1 pixel in - 1).
// Results round to nearest. kInvalidArgument for a non-positive target size or an image whose
// pixels do not match its shape.
DecodedImage ResizeImage(const DecodedImage& image, int height, int width);

// The `height` x `width` window of `image` whose top-left pixel is (`top`, `left`), every
// channel. kInvalidArgument when the window does not lie inside the image (or is empty), or
// the image's pixels do not match its shape.
DecodedImage CropImage(const DecodedImage& image, int top, int left, int height, int width);

}  // namespace cortado
