// SPDX-License-Identifier: Apache-2.0
#include "data/image_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/config.hpp"
#include "core/error.hpp"

#if CORTADO_WITH_IMAGES
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#endif

namespace cortado {
namespace {

constexpr int kMaxSide = 1 << 15;
constexpr int64_t kMaxPixels = int64_t{1} << 28;

bool IsJpeg(const uint8_t* b, size_t n) {
  return n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff;
}

bool IsPng(const uint8_t* b, size_t n) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return n >= 8 && std::memcmp(b, kSignature, 8) == 0;
}

void CheckSize(int height, int width, const char* format, const std::string& what) {
  if (height <= 0 || width <= 0 || height > kMaxSide || width > kMaxSide ||
      int64_t{height} * width > kMaxPixels) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: a {} image of {} x {} pixels; supported are 1 to {} per side and at most "
                  "{} pixels",
                  what, format, height, width, kMaxSide, kMaxPixels);
  }
}

// Interleaved (H x W x C) pixels to planar (C x H x W).
DecodedImage Planar(const std::vector<uint8_t>& interleaved, int channels, int height, int width) {
  DecodedImage image;
  image.channels = channels;
  image.height = height;
  image.width = width;
  const size_t plane = static_cast<size_t>(height) * static_cast<size_t>(width);
  image.pixels.resize(plane * static_cast<size_t>(channels));
  for (size_t p = 0; p < plane; ++p) {
    for (int c = 0; c < channels; ++c) {
      image.pixels[static_cast<size_t>(c) * plane + p] =
          interleaved[p * static_cast<size_t>(channels) + static_cast<size_t>(c)];
    }
  }
  return image;
}

// BGR planes to one gray plane (BT.601 luma, rounded to nearest).
DecodedImage ToGray(const DecodedImage& bgr) {
  DecodedImage gray;
  gray.channels = 1;
  gray.height = bgr.height;
  gray.width = bgr.width;
  const size_t plane = static_cast<size_t>(bgr.height) * static_cast<size_t>(bgr.width);
  gray.pixels.resize(plane);
  const uint8_t* b = bgr.pixels.data();
  const uint8_t* g = b + plane;
  const uint8_t* r = g + plane;
  for (size_t p = 0; p < plane; ++p) {
    const double y = 0.299 * r[p] + 0.587 * g[p] + 0.114 * b[p];
    gray.pixels[p] = static_cast<uint8_t>(std::min(255.0, std::floor(y + 0.5)));
  }
  return gray;
}

// One gray plane replicated into three.
DecodedImage ToColor(const DecodedImage& gray) {
  DecodedImage color = gray;
  color.channels = 3;
  color.pixels.reserve(gray.pixels.size() * 3);
  color.pixels.insert(color.pixels.end(), gray.pixels.begin(), gray.pixels.end());
  color.pixels.insert(color.pixels.end(), gray.pixels.begin(), gray.pixels.end());
  return color;
}

#if CORTADO_WITH_IMAGES

// ---- JPEG -------------------------------------------------------------------------------------

// libjpeg reports errors through error_exit, which must not return: it longjmps back into
// DecodeJpegInto, whose frame holds no object with a destructor between setjmp and longjmp.
struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  int warnings;
};

void OnJpegError(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Level -1: a warning (corrupt data that libjpeg works around); keep the first one's text.
void OnJpegMessage(j_common_ptr cinfo, int level) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (level < 0 && errors->warnings++ == 0) (*cinfo->err->format_message)(cinfo, errors->message);
}

enum class JpegResult { kOk, kError, kWarning, kCmyk, kTooLarge };

// Decodes into `out` (interleaved), which the caller owns. Returns what happened; on kError
// and kWarning, `errors->message` says why.
JpegResult DecodeJpegInto(const uint8_t* bytes, size_t size, ColorMode mode, JpegErrors* errors,
                          std::vector<uint8_t>* out, int* height, int* width, int* channels) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&errors->mgr);
  errors->mgr.error_exit = OnJpegError;
  errors->mgr.emit_message = OnJpegMessage;
  errors->warnings = 0;
  errors->message[0] = 0;
  if (setjmp(errors->jump) != 0) {
    jpeg_destroy_decompress(&cinfo);
    return JpegResult::kError;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes, static_cast<unsigned long>(size));  // NOLINT(runtime/int)
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return JpegResult::kCmyk;
  }
  const bool gray = mode == ColorMode::kGray ||
                    (mode == ColorMode::kKeep && cinfo.jpeg_color_space == JCS_GRAYSCALE);
  cinfo.out_color_space = gray ? JCS_GRAYSCALE : JCS_EXT_BGR;
  jpeg_start_decompress(&cinfo);
  *height = static_cast<int>(cinfo.output_height);
  *width = static_cast<int>(cinfo.output_width);
  *channels = cinfo.output_components;
  if (*height <= 0 || *width <= 0 || *height > kMaxSide || *width > kMaxSide ||
      int64_t{*height} * *width > kMaxPixels) {
    jpeg_destroy_decompress(&cinfo);
    return JpegResult::kTooLarge;
  }
  const size_t stride = static_cast<size_t>(*width) * static_cast<size_t>(*channels);
  out->resize(stride * static_cast<size_t>(*height));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->data() + stride * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return errors->warnings > 0 ? JpegResult::kWarning : JpegResult::kOk;
}

DecodedImage DecodeJpeg(const uint8_t* bytes, size_t size, ColorMode mode,
                        const std::string& what) {
  JpegErrors errors;
  std::vector<uint8_t> interleaved;
  int height = 0, width = 0, channels = 0;
  switch (DecodeJpegInto(bytes, size, mode, &errors, &interleaved, &height, &width, &channels)) {
    case JpegResult::kOk:
      break;
    case JpegResult::kError:
      CORTADO_THROW(kParse, "{}: corrupt JPEG data: {}", what, errors.message);
    case JpegResult::kWarning:
      CORTADO_THROW(kParse, "{}: corrupt JPEG data: {}", what, errors.message);
    case JpegResult::kCmyk:
      CORTADO_THROW(kInvalidArgument, "{}: a CMYK JPEG image; supported are gray and color", what);
    case JpegResult::kTooLarge:
      CheckSize(height, width, "JPEG", what);
      break;
  }
  DecodedImage image = Planar(interleaved, channels, height, width);
  if (mode == ColorMode::kColor && image.channels == 1) return ToColor(image);
  return image;
}

// ---- PNG (libpng's simplified API: no longjmp here) --------------------------------------------

DecodedImage DecodePng(const uint8_t* bytes, size_t size, ColorMode mode, const std::string& what) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&png, bytes, size) == 0) {
    const std::string message = png.message;
    png_image_free(&png);
    CORTADO_THROW(kParse, "{}: corrupt PNG data: {}", what, message);
  }
  const bool file_gray = (png.format & PNG_FORMAT_FLAG_COLOR) == 0;
  const int height = static_cast<int>(png.height);
  const int width = static_cast<int>(png.width);
  if (height <= 0 || width <= 0 || height > kMaxSide || width > kMaxSide ||
      int64_t{height} * width > kMaxPixels) {
    png_image_free(&png);
    CheckSize(height, width, "PNG", what);
  }
  // A gray file decodes to gray, a color file to BGR; the mode converts afterwards (so that gray
  // from color uses Caffe's luma weights, not libpng's linear-light ones).
  png.format = file_gray ? PNG_FORMAT_GRAY : PNG_FORMAT_BGR;
  const int channels = file_gray ? 1 : 3;
  std::vector<uint8_t> interleaved(PNG_IMAGE_SIZE(png));
  if (png_image_finish_read(&png, nullptr, interleaved.data(), 0, nullptr) == 0) {
    const std::string message = png.message;
    png_image_free(&png);
    CORTADO_THROW(kParse, "{}: corrupt PNG data: {}", what, message);
  }
  DecodedImage image = Planar(interleaved, channels, height, width);
  if (mode == ColorMode::kColor && channels == 1) return ToColor(image);
  if (mode == ColorMode::kGray && channels == 3) return ToGray(image);
  return image;
}

#endif  // CORTADO_WITH_IMAGES

}  // namespace

bool ImageCodecsAvailable() { return CORTADO_WITH_IMAGES != 0; }

bool LooksLikeEncodedImage(const void* bytes, size_t size) {
  const auto* b = static_cast<const uint8_t*>(bytes);
  return b != nullptr && (IsJpeg(b, size) || IsPng(b, size));
}

DecodedImage DecodeImage(const void* bytes, size_t size, ColorMode mode, const std::string& what) {
  const auto* b = static_cast<const uint8_t*>(bytes);
  if (b == nullptr || size == 0) CORTADO_THROW(kParse, "{}: no image data (0 bytes)", what);
  if (!IsJpeg(b, size) && !IsPng(b, size)) {
    std::string head;
    for (size_t i = 0; i < std::min<size_t>(size, 4); ++i) {
      head += fmt::format("{}{:02x}", i == 0 ? "" : " ", b[i]);
    }
    CORTADO_THROW(kParse, "{}: not a JPEG or PNG image (first bytes {}, {} bytes)", what, head,
                  size);
  }
#if CORTADO_WITH_IMAGES
  return IsJpeg(b, size) ? DecodeJpeg(b, size, mode, what) : DecodePng(b, size, mode, what);
#else
  (void)mode;
  CORTADO_THROW(kUnimplemented,
                "{}: an encoded image, but this build has no image codecs (libjpeg and libpng "
                "were not found: WITH_IMAGES=OFF)",
                what);
#endif
}

DecodedImage ResizeImage(const DecodedImage& image, int height, int width) {
  if (height <= 0 || width <= 0) {
    CORTADO_THROW(kInvalidArgument, "cannot resize an image to {} x {}", height, width);
  }
  DecodedImage out;
  out.channels = image.channels;
  out.height = height;
  out.width = width;
  out.pixels.resize(static_cast<size_t>(image.channels) * height * width);
  // Per axis: the two source indices and the weight of the second, OpenCV's INTER_LINEAR rule.
  struct Tap {
    int i0, i1;
    float w1;
  };
  auto taps = [](int in, int n) {
    std::vector<Tap> t(static_cast<size_t>(n));
    const double scale = static_cast<double>(in) / n;
    for (int d = 0; d < n; ++d) {
      double s = (d + 0.5) * scale - 0.5;
      int i0 = static_cast<int>(std::floor(s));
      double f = s - i0;
      if (i0 < 0) {
        i0 = 0;
        f = 0;
      }
      if (i0 >= in - 1) {
        i0 = in - 1;
        f = 0;
      }
      t[static_cast<size_t>(d)] = {i0, std::min(i0 + 1, in - 1), static_cast<float>(f)};
    }
    return t;
  };
  const std::vector<Tap> ys = taps(image.height, height);
  const std::vector<Tap> xs = taps(image.width, width);
  const size_t in_plane = static_cast<size_t>(image.height) * image.width;
  const size_t out_plane = static_cast<size_t>(height) * width;
  for (int c = 0; c < image.channels; ++c) {
    const uint8_t* src = image.pixels.data() + c * in_plane;
    uint8_t* dst = out.pixels.data() + c * out_plane;
    for (int y = 0; y < height; ++y) {
      const Tap& ty = ys[static_cast<size_t>(y)];
      const uint8_t* r0 = src + static_cast<size_t>(ty.i0) * image.width;
      const uint8_t* r1 = src + static_cast<size_t>(ty.i1) * image.width;
      for (int x = 0; x < width; ++x) {
        const Tap& tx = xs[static_cast<size_t>(x)];
        const float top = r0[tx.i0] + tx.w1 * (r0[tx.i1] - r0[tx.i0]);
        const float bottom = r1[tx.i0] + tx.w1 * (r1[tx.i1] - r1[tx.i0]);
        const float v = top + ty.w1 * (bottom - top);
        dst[static_cast<size_t>(y) * width + x] =
            static_cast<uint8_t>(std::clamp(std::floor(v + 0.5f), 0.0f, 255.0f));
      }
    }
  }
  return out;
}

}  // namespace cortado
