// SPDX-License-Identifier: Apache-2.0
// JPEG and PNG decoding (libjpeg-turbo, libpng) and bilinear resizing, for encoded datums
// (`encoded: true`, what Caffe's `convert_imageset --encoded` writes) and for images that reach
// the feed layers from Spark.
//
// A decoded image is planar: channels x height x width uint8, as a raw caffe::Datum holds it, in
// Caffe's channel order (BGR for color: what Caffe gets from OpenCV's imdecode). Differences from
// OpenCV: PNG alpha is composited onto black by libpng rather than dropped (they differ only on
// transparent pixels); a 16-bit PNG is reduced to 8 bits by libpng's simplified API, which
// honours the file's gamma (OpenCV drops the low byte); a color PNG forced to gray uses Y = 0.299 R + 0.587 G + 0.114 B rounded to
// nearest (OpenCV's fixed-point rounding may differ by 1); bilinear resizing computes in float
// (OpenCV's fixed-point interpolation may differ by 1). A color JPEG forced to gray takes
// libjpeg's luma, as OpenCV does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cortado {

// The channels wanted, as Caffe's TransformationParameter force_color / force_gray choose them.
enum class ColorMode {
  kKeep,   // gray stays 1 channel, color gives 3 (alpha dropped): OpenCV's IMREAD_ANYCOLOR
  kColor,  // 3 channels, gray replicated (force_color)
  kGray,   // 1 channel (force_gray)
};

struct DecodedImage {
  int channels = 0;
  int height = 0;
  int width = 0;
  std::vector<uint8_t> pixels;  // channels x height x width
};

// True when this build decodes images (libjpeg and libpng were found: WITH_IMAGES).
bool ImageCodecsAvailable();

// True when `bytes` start with the JPEG or the PNG signature.
bool LooksLikeEncodedImage(const void* bytes, size_t size);

// Decodes a JPEG or PNG file's bytes. Every failure throws, the message starting with `what`
// (the caller's name for the image: "record 'k' of LMDB database 'p'", a path): kParse for data
// that is not an image, corrupt or truncated (a JPEG that libjpeg warns about counts as
// corrupt), kInvalidArgument for images this decoder refuses (CMYK JPEG; a side over 32768 or
// more than 2^28 pixels), kUnimplemented in a build without the codecs.
DecodedImage DecodeImage(const void* bytes, size_t size, ColorMode mode, const std::string& what);

// `image` resized to `height` x `width` (both > 0) by bilinear interpolation with OpenCV's
// INTER_LINEAR conventions: source coordinate (d + 0.5) * in / out - 0.5, clamped to the edges.
DecodedImage ResizeImage(const DecodedImage& image, int height, int width);

}  // namespace cortado
