// SPDX-License-Identifier: Apache-2.0
#include "data/image_codec.hpp"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/config.hpp"
#include "core/error.hpp"

#if CORTADO_WITH_IMAGES
// jpeglib.h needs FILE and size_t declared first (<cstdio> above).
#include <jpeglib.h>
// jerror.h, the message codes (JWRN_*), needs jpeglib.h first.
#include <jerror.h>
#include <png.h>
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

#if CORTADO_WITH_IMAGES

// Throws unless height x width is within the limits (checked before any pixel is allocated).
void CheckSize(int64_t height, int64_t width, const char* format, const std::string& what) {
  if (height <= 0 || width <= 0 || height > kMaxSide || width > kMaxSide ||
      height * width > kMaxPixels) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: a {} image of {} x {} pixels (height x width); supported are 1 to {} per "
                  "side and at most {} pixels",
                  what, format, height, width, kMaxSide, kMaxPixels);
  }
}

// Interleaved rows (H x W x C, R G B order for color) to planar B, G, R (C x H x W).
DecodedImage Planar(const uint8_t* interleaved, int channels, int height, int width) {
  DecodedImage image;
  image.channels = channels;
  image.height = height;
  image.width = width;
  const size_t plane = static_cast<size_t>(height) * static_cast<size_t>(width);
  const size_t step = static_cast<size_t>(channels);
  image.pixels.resize(plane * step);
  for (size_t c = 0; c < step; ++c) {
    // Plane c takes interleaved channel step - 1 - c: B, G, R from R, G, B (gray: itself).
    const uint8_t* in = interleaved + (step - 1 - c);
    uint8_t* out = image.pixels.data() + c * plane;
    for (size_t p = 0; p < plane; ++p) out[p] = in[p * step];
  }
  return image;
}

// B, G, R planes to one gray plane: Y = 0.299 R + 0.587 G + 0.114 B (ITU-R BT.601), rounded to
// nearest; in integers, as the weights are exact in thousandths.
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
    gray.pixels[p] = static_cast<uint8_t>((299 * r[p] + 587 * g[p] + 114 * b[p] + 500) / 1000);
  }
  return gray;
}

// One gray plane replicated into B, G and R.
DecodedImage ToColor(const DecodedImage& gray) {
  DecodedImage color;
  color.channels = 3;
  color.height = gray.height;
  color.width = gray.width;
  color.pixels.reserve(gray.pixels.size() * 3);
  for (int c = 0; c < 3; ++c) {
    color.pixels.insert(color.pixels.end(), gray.pixels.begin(), gray.pixels.end());
  }
  return color;
}

DecodedImage ApplyMode(DecodedImage image, ColorMode mode) {
  if (mode == ColorMode::kColor && image.channels == 1) return ToColor(image);
  if (mode == ColorMode::kGray && image.channels == 3) return ToGray(image);
  return image;
}

// Both libraries report a fatal error through a callback that must not return. The callbacks
// here record the message and longjmp back to the setjmp of one of the small Jpeg*/Png* step
// functions below. Those functions hold no local with a destructor and read no local after the
// jump, and everything that needs cleaning up (the library's state, our buffers) lives in the
// caller's decoder object, whose destructor frees it: so the jump skips no destructor and no
// C++ exception crosses the C libraries' frames.

// ---- JPEG -------------------------------------------------------------------------------------

struct JpegErrorManager {
  jpeg_error_mgr mgr;  // first: libjpeg passes &mgr, which we cast back
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnJpegError(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Level -1 is a warning: corrupt data that libjpeg would work around (a truncated file gets a
// fake end marker and gray rows, "Premature end of JPEG file"). A half-gray image must not reach
// training unnoticed, so a warning is fatal, except the one about a newer JFIF version number,
// which says nothing about the pixels. Levels >= 0 are trace messages: ignored (the default
// handler would print to stderr).
void OnJpegMessage(j_common_ptr cinfo, int level) {
  if (level >= 0 || cinfo->err->msg_code == JWRN_JFIF_MAJOR) return;
  cinfo->err->num_warnings++;
  OnJpegError(cinfo);
}

// Owns libjpeg's decompressor; its destructor frees it however decoding ended.
struct JpegDecoder {
  JpegDecoder() {
    std::memset(&cinfo, 0, sizeof(cinfo));  // so that the destructor may run at any point
    cinfo.err = jpeg_std_error(&errors.mgr);
    errors.mgr.error_exit = OnJpegError;
    errors.mgr.emit_message = OnJpegMessage;
    errors.message[0] = '\0';
  }
  ~JpegDecoder() { jpeg_destroy_decompress(&cinfo); }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  jpeg_decompress_struct cinfo;
  JpegErrorManager errors;
};

// Creates the decompressor over the bytes and reads the header. False on error (message set).
bool JpegReadHeader(JpegDecoder* d, const uint8_t* bytes, size_t size) {
  if (setjmp(d->errors.jump) != 0) return false;
  jpeg_create_decompress(&d->cinfo);
  // const_cast: libjpeg-turbo before 1.5 and IJG libjpeg 8 declare the buffer non-const.
  jpeg_mem_src(&d->cinfo, const_cast<uint8_t*>(bytes),
               static_cast<unsigned long>(size));  // NOLINT(runtime/int)
  jpeg_read_header(&d->cinfo, TRUE);
  return true;
}

// Decodes every row into `out` (`rows` rows of `stride` bytes, allocated by the caller from the
// header) and finishes. False on error (message set).
bool JpegReadPixels(JpegDecoder* d, uint8_t* out, size_t stride, size_t rows) {
  if (setjmp(d->errors.jump) != 0) return false;
  jpeg_start_decompress(&d->cinfo);
  // Without scaling the output is the image's size; check rather than trust it, before writing.
  if (static_cast<size_t>(d->cinfo.output_width) *
              static_cast<size_t>(d->cinfo.output_components) !=
          stride ||
      d->cinfo.output_height != rows) {
    std::snprintf(d->errors.message, sizeof(d->errors.message),
                  "libjpeg decodes %u x %u x %d, not the size of the header",
                  d->cinfo.output_height, d->cinfo.output_width, d->cinfo.output_components);
    return false;
  }
  while (d->cinfo.output_scanline < d->cinfo.output_height) {
    JSAMPROW row = out + stride * d->cinfo.output_scanline;
    jpeg_read_scanlines(&d->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&d->cinfo);
  return true;
}

// The decoders' output before the pixels are decoded into it: not zeroed, since a damaged file
// claiming a large image fails at its first missing row, and zeroing hundreds of MB for it first
// would take seconds.
std::unique_ptr<uint8_t[]> Uninitialized(size_t bytes) {
  return std::unique_ptr<uint8_t[]>(new uint8_t[bytes]);
}

// Every block of a component that a Huffman-coded scan carries takes at least one bit (its DC
// code), and a JPEG decodes only with at least one such scan over some component (libjpeg warns
// of a progression that starts otherwise, and warnings are errors here). So a file of fewer bytes
// than an eighth of the blocks of its smallest component is truncated whatever it holds; refused
// before its pixels are allocated and decoded (a 422-byte file claiming 24579 x 6916 pixels took
// 510 MB). Arithmetic coding has no such bound: a file of a few hundred bytes can hold a flat
// image of any size (its decoder reads zeros past the data without a warning, and a 16 x 16 file
// whose header claimed 16384 x 16384 pixels decoded, in 9 s). So an arithmetic-coded JPEG, a
// rare coding, may have at most kMaxArithmeticCoefficientBytes of coefficients (128 bytes per
// block of each component: about 11 million pixels of RGB without subsampling).
constexpr uint64_t kMaxArithmeticCoefficientBytes = uint64_t{64} << 20;

void CheckJpegClaims(const jpeg_decompress_struct& cinfo, size_t size, const std::string& what) {
  uint64_t fewest = UINT64_MAX;
  uint64_t all = 0;
  for (int c = 0; c < cinfo.num_components; ++c) {
    const jpeg_component_info& component = cinfo.comp_info[c];
    const uint64_t blocks =
        uint64_t{component.width_in_blocks} * uint64_t{component.height_in_blocks};
    fewest = std::min(fewest, blocks);
    all += blocks;
  }
  if (cinfo.arith_code) {
    const uint64_t coefficients = all * DCTSIZE2 * sizeof(JCOEF);
    if (coefficients > kMaxArithmeticCoefficientBytes) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: an arithmetic-coded JPEG of {} x {} pixels (height x width), {} MiB of "
                    "coefficients; supported are at most {} MiB for this coding (a file of a few "
                    "bytes can claim any size)",
                    what, cinfo.image_height, cinfo.image_width, coefficients >> 20,
                    kMaxArithmeticCoefficientBytes >> 20);
    }
    return;
  }
  const uint64_t least = fewest / 8;
  if (size < least) {
    CORTADO_THROW(kParse,
                  "{}: corrupt JPEG data: truncated: {} bytes cannot hold a {} x {} image "
                  "(height x width; Huffman-coded, it takes at least {} bytes)",
                  what, size, cinfo.image_height, cinfo.image_width, least);
  }
}

DecodedImage DecodeJpeg(const uint8_t* bytes, size_t size, ColorMode mode,
                        const std::string& what) {
  JpegDecoder d;
  if (!JpegReadHeader(&d, bytes, size)) {
    CORTADO_THROW(kParse, "{}: corrupt JPEG data: {}", what, d.errors.message);
  }
  jpeg_decompress_struct& cinfo = d.cinfo;
  const J_COLOR_SPACE space = cinfo.jpeg_color_space;
  if (space == JCS_CMYK || space == JCS_YCCK) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: a CMYK JPEG image; supported are gray and color (YCbCr or RGB) JPEGs", what);
  }
  if (space != JCS_GRAYSCALE && space != JCS_YCbCr && space != JCS_RGB) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: a JPEG image of {} components in an unknown color space (libjpeg's code "
                  "{}); supported are gray and color (YCbCr or RGB) JPEGs",
                  what, cinfo.num_components, static_cast<int>(space));
  }
  CheckSize(cinfo.image_height, cinfo.image_width, "JPEG", what);
  CheckJpegClaims(cinfo, size, what);
  // Gray decodes to gray (replicated afterwards for kColor, as libjpeg 6b cannot), color to RGB
  // or, for kGray, to libjpeg's luma as OpenCV asks for it.
  const bool gray = space == JCS_GRAYSCALE || mode == ColorMode::kGray;
  cinfo.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  const int channels = gray ? 1 : 3;
  const int height = static_cast<int>(cinfo.image_height);
  const int width = static_cast<int>(cinfo.image_width);
  const size_t stride = static_cast<size_t>(width) * static_cast<size_t>(channels);
  const std::unique_ptr<uint8_t[]> interleaved =
      Uninitialized(stride * static_cast<size_t>(height));
  if (!JpegReadPixels(&d, interleaved.get(), stride, static_cast<size_t>(height))) {
    CORTADO_THROW(kParse, "{}: corrupt JPEG data: {}", what, d.errors.message);
  }
  return ApplyMode(Planar(interleaved.get(), channels, height, width), mode);
}

// ---- PNG --------------------------------------------------------------------------------------

// Owns libpng's reader and the input's cursor; its destructor frees the reader however decoding
// ended.
struct PngDecoder {
  PngDecoder(const uint8_t* data, size_t n) : bytes(data), size(n) { message[0] = '\0'; }
  ~PngDecoder() { png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr); }
  PngDecoder(const PngDecoder&) = delete;
  PngDecoder& operator=(const PngDecoder&) = delete;

  static void OnError(png_structp png, png_const_charp message) {
    auto* d = static_cast<PngDecoder*>(png_get_error_ptr(png));
    std::snprintf(d->message, sizeof(d->message), "%s", message);
    png_longjmp(png, 1);
  }
  // Warnings (an sRGB profile libpng dislikes, a bad ancillary chunk it skips) do not touch the
  // pixels; dropped, where the default handler would print them.
  static void OnWarning(png_structp /*png*/, png_const_charp /*message*/) {}
  // Reads from the bytes in memory; running out is an error (a truncated file).
  static void OnRead(png_structp png, png_bytep out, png_size_t n) {
    auto* d = static_cast<PngDecoder*>(png_get_io_ptr(png));
    if (n > d->size - d->offset) png_error(png, "truncated (the data ends too early)");
    std::memcpy(out, d->bytes + d->offset, n);
    d->offset += n;
  }

  const uint8_t* bytes;
  size_t size;
  size_t offset = 0;
  png_structp png = nullptr;
  png_infop info = nullptr;
  char message[256];
  // The header, and the rows after the transforms.
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, channels = 0;
  size_t row_bytes = 0;
};

// Reads the signature and the chunks up to the first IDAT. False on error (message set).
bool PngReadHeader(PngDecoder* d) {
  if (setjmp(png_jmpbuf(d->png)) != 0) return false;
  png_set_read_fn(d->png, d, PngDecoder::OnRead);
#ifdef PNG_SET_USER_LIMITS_SUPPORTED
  // libpng's own limit (a million per side) would answer first with a message of its own; ours
  // (CheckSize) is lower and says what is supported.
  png_set_user_limits(d->png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
#endif
  png_read_info(d->png, d->info);
  png_get_IHDR(d->png, d->info, &d->width, &d->height, &d->bit_depth, &d->color_type, nullptr,
               nullptr, nullptr);
  return true;
}

// Sets the transforms that give 8-bit gray or RGB rows (OpenCV's, see the header) and reads the
// resulting row layout. False on error (message set).
bool PngSetTransforms(PngDecoder* d) {
  if (setjmp(png_jmpbuf(d->png)) != 0) return false;
  png_structp png = d->png;
  if (d->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((d->color_type & PNG_COLOR_MASK_COLOR) == 0 && d->bit_depth < 8) {
    png_set_expand_gray_1_2_4_to_8(png);
  }
  if (d->bit_depth == 16) png_set_strip_16(png);
  // Drops an alpha channel, and the alpha that palette expansion makes from a tRNS chunk.
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, d->info);
  d->channels = png_get_channels(png, d->info);
  d->row_bytes = png_get_rowbytes(png, d->info);
  return true;
}

// Decodes every row (all interlace passes) and reads the chunks after the image up to IEND.
// False on error (message set).
bool PngReadPixels(PngDecoder* d, png_bytepp rows) {
  if (setjmp(png_jmpbuf(d->png)) != 0) return false;
  png_read_image(d->png, rows);
  png_read_end(d->png, nullptr);
  return true;
}

DecodedImage DecodePng(const uint8_t* bytes, size_t size, ColorMode mode, const std::string& what) {
  PngDecoder d(bytes, size);
  d.png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &d, PngDecoder::OnError, PngDecoder::OnWarning);
  if (d.png != nullptr) d.info = png_create_info_struct(d.png);
  if (d.png == nullptr || d.info == nullptr) {
    CORTADO_THROW(kOutOfMemory, "{}: libpng could not allocate its decoder", what);
  }
  if (!PngReadHeader(&d)) CORTADO_THROW(kParse, "{}: corrupt PNG data: {}", what, d.message);
  CheckSize(d.height, d.width, "PNG", what);
  if (!PngSetTransforms(&d)) CORTADO_THROW(kParse, "{}: corrupt PNG data: {}", what, d.message);
  const int height = static_cast<int>(d.height);
  const int width = static_cast<int>(d.width);
  const int channels = d.channels;
  // The transforms leave 1 (gray) or 3 (RGB) bytes per pixel for every PNG color type.
  CORTADO_CHECK(channels == 1 || channels == 3, "libpng gave {} channels", channels);
  const size_t stride = static_cast<size_t>(width) * static_cast<size_t>(channels);
  CORTADO_CHECK_EQ(d.row_bytes, stride);
  const std::unique_ptr<uint8_t[]> interleaved =
      Uninitialized(stride * static_cast<size_t>(height));
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = interleaved.get() + y * stride;
  if (!PngReadPixels(&d, rows.data())) {
    CORTADO_THROW(kParse, "{}: corrupt PNG data: {}", what, d.message);
  }
  return ApplyMode(Planar(interleaved.get(), channels, height, width), mode);
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
    CORTADO_THROW(kParse, "{}: not a JPEG or PNG image (first bytes {}, {} bytes in all)", what,
                  head, size);
  }
#if CORTADO_WITH_IMAGES
  return IsJpeg(b, size) ? DecodeJpeg(b, size, mode, what) : DecodePng(b, size, mode, what);
#else
  (void)mode;
  CORTADO_THROW(kUnimplemented,
                "{}: a {} image, but this build cannot decode it: built without libjpeg/libpng "
                "(WITH_IMAGES=OFF)",
                what, IsJpeg(b, size) ? "JPEG" : "PNG");
#endif
}

DecodedImage CropImage(const DecodedImage& image, int top, int left, int height, int width) {
  const size_t in_plane = static_cast<size_t>(std::max(image.height, 0)) *
                          static_cast<size_t>(std::max(image.width, 0));
  if (image.channels <= 0 ||
      image.pixels.size() != in_plane * static_cast<size_t>(image.channels)) {
    CORTADO_THROW(kInvalidArgument, "cannot crop an image of {} x {} x {} holding {} bytes",
                  image.channels, image.height, image.width, image.pixels.size());
  }
  if (height <= 0 || width <= 0 || top < 0 || left < 0 || top + height > image.height ||
      left + width > image.width) {
    CORTADO_THROW(kInvalidArgument,
                  "cannot crop {} x {} at ({}, {}) from an image of {} x {} (height x width)",
                  height, width, top, left, image.height, image.width);
  }
  DecodedImage out;
  out.channels = image.channels;
  out.height = height;
  out.width = width;
  out.pixels.resize(static_cast<size_t>(image.channels) * static_cast<size_t>(height) *
                    static_cast<size_t>(width));
  uint8_t* to = out.pixels.data();
  for (int c = 0; c < image.channels; ++c) {
    for (int y = 0; y < height; ++y) {
      const uint8_t* from = image.pixels.data() + static_cast<size_t>(c) * in_plane +
                            static_cast<size_t>(top + y) * static_cast<size_t>(image.width) +
                            static_cast<size_t>(left);
      std::copy(from, from + width, to);
      to += width;
    }
  }
  return out;
}

DecodedImage ResizeImage(const DecodedImage& image, int height, int width) {
  if (height <= 0 || width <= 0) {
    CORTADO_THROW(kInvalidArgument, "cannot resize an image to {} x {} (height x width)", height,
                  width);
  }
  const size_t in_plane = static_cast<size_t>(std::max(image.height, 0)) *
                          static_cast<size_t>(std::max(image.width, 0));
  if (image.channels <= 0 || image.height <= 0 || image.width <= 0 ||
      image.pixels.size() != in_plane * static_cast<size_t>(image.channels)) {
    CORTADO_THROW(kInvalidArgument,
                  "cannot resize an image of {} x {} x {} (channels x height x width) holding {} "
                  "bytes",
                  image.channels, image.height, image.width, image.pixels.size());
  }
  DecodedImage out;
  out.channels = image.channels;
  out.height = height;
  out.width = width;
  const size_t out_plane = static_cast<size_t>(height) * static_cast<size_t>(width);
  out.pixels.resize(static_cast<size_t>(image.channels) * out_plane);
  // Per output index along one axis: the two source indices and the weight of the second.
  struct Tap {
    int i0, i1;
    float w1;
  };
  auto taps = [](int in, int n) {
    std::vector<Tap> t(static_cast<size_t>(n));
    const double scale = static_cast<double>(in) / n;
    for (int d = 0; d < n; ++d) {
      const double s = (d + 0.5) * scale - 0.5;
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
  const size_t in_width = static_cast<size_t>(image.width);
  for (size_t c = 0; c < static_cast<size_t>(image.channels); ++c) {
    const uint8_t* src = image.pixels.data() + c * in_plane;
    uint8_t* dst = out.pixels.data() + c * out_plane;
    for (size_t y = 0; y < static_cast<size_t>(height); ++y) {
      const Tap& ty = ys[y];
      const uint8_t* r0 = src + static_cast<size_t>(ty.i0) * in_width;
      const uint8_t* r1 = src + static_cast<size_t>(ty.i1) * in_width;
      for (size_t x = 0; x < static_cast<size_t>(width); ++x) {
        const Tap& tx = xs[x];
        const float top = r0[tx.i0] + tx.w1 * static_cast<float>(r0[tx.i1] - r0[tx.i0]);
        const float bottom = r1[tx.i0] + tx.w1 * static_cast<float>(r1[tx.i1] - r1[tx.i0]);
        const float v = top + ty.w1 * (bottom - top);
        dst[y * static_cast<size_t>(width) + x] =
            static_cast<uint8_t>(std::clamp(std::floor(v + 0.5f), 0.0f, 255.0f));
      }
    }
  }
  return out;
}

}  // namespace cortado
