// SPDX-License-Identifier: Apache-2.0
// Helpers for the image tests: JPEG and PNG files encoded with libjpeg and libpng themselves
// (independently of the decoder under test), and the planar B, G, R bytes that Caffe keeps for
// interleaved R, G, B pixels. Only in builds with the codecs (CORTADO_WITH_IMAGES); without them,
// CORTADO_SKIP_WITHOUT_IMAGES declares the tests that need them as skipped.
#pragma once

#include <gtest/gtest.h>

#include "core/config.hpp"

// In a build without the codecs, a test that needs them (its body inside
// `#if CORTADO_WITH_IMAGES`) is declared again with this macro, under the same name, in the
// `#else` branch: ctest then lists it as skipped rather than missing.
#define CORTADO_SKIP_WITHOUT_IMAGES(suite, name) \
  TEST(suite, name) { GTEST_SKIP() << "built without libjpeg/libpng (WITH_IMAGES=OFF)"; }

#if CORTADO_WITH_IMAGES
#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <string>
#include <vector>

namespace cortado::testing {

// Interleaved pixels, row-major: 1 (gray), 2 (gray, alpha), 3 (R, G, B) or 4 (R, G, B, A)
// bytes per pixel.
struct Pixels {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> data;
};

// Appends `values` one by one (GCC 12 at -O3 warns falsely about vector::insert of small
// initializer lists and ranges).
inline void Append(std::vector<uint8_t>* v, std::initializer_list<uint8_t> values) {
  for (uint8_t x : values) v->push_back(x);
}
inline void Append(std::vector<uint8_t>* v, const std::vector<uint8_t>& values) {
  for (uint8_t x : values) v->push_back(x);
}

// Every pixel (r, g, b).
inline Pixels Flat(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  Pixels p{width, height, 3, {}};
  for (int i = 0; i < width * height; ++i) Append(&p.data, {r, g, b});
  return p;
}

// Distinct values: pixel i (row-major) is (i + offset, 100 + i, 200 - i), all mod 256.
inline Pixels Ramp(int width, int height, int offset = 0) {
  Pixels p{width, height, 3, {}};
  for (int i = 0; i < width * height; ++i) {
    Append(&p.data, {static_cast<uint8_t>(i + offset), static_cast<uint8_t>(100 + i),
                     static_cast<uint8_t>(200 - i)});
  }
  return p;
}

// Interleaved R, G, B (and A) as Caffe's planar layout: B plane, G plane, R plane (alpha
// dropped); gray (and alpha) as one plane.
inline std::vector<uint8_t> PlanarBgr(const Pixels& p) {
  const size_t plane = static_cast<size_t>(p.width) * static_cast<size_t>(p.height);
  const size_t step = static_cast<size_t>(p.channels);
  std::vector<uint8_t> out;
  const int color_planes = p.channels >= 3 ? 3 : 1;
  for (int c = color_planes - 1; c >= 0; --c) {
    for (size_t i = 0; i < plane; ++i) out.push_back(p.data[i * step + static_cast<size_t>(c)]);
  }
  return out;
}

// ---- PNG --------------------------------------------------------------------------------------

// A PNG file to write: `rows` holds the image's rows in PNG's own layout (bit_depth bits per
// sample, samples per pixel by color_type, 16-bit samples big-endian), rows packed back to back.
struct PngSpec {
  int width = 0, height = 0;
  int color_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<uint8_t> rows;
  std::vector<png_color> palette;  // PNG_COLOR_TYPE_PALETTE
  std::vector<uint8_t> alphas;     // a tRNS chunk: alpha per palette entry
};

namespace detail {

struct PngWriteJob {
  const PngSpec* spec;
  std::vector<uint8_t>* out;
  png_structp png;
  png_infop info;
  png_bytepp rows;
};

inline void PngWriteBytes(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
inline void PngFlush(png_structp /*png*/) {}
inline void PngWriteError(png_structp png, png_const_charp message) {
  ADD_FAILURE() << "libpng (writing): " << message;
  png_longjmp(png, 1);
}

// The setjmp frame: no locals with destructors (see cpp/data/image_codec.cpp).
inline bool PngWrite(PngWriteJob* job) {
  if (setjmp(png_jmpbuf(job->png)) != 0) return false;
  const PngSpec& s = *job->spec;
  png_set_write_fn(job->png, job->out, PngWriteBytes, PngFlush);
  png_set_IHDR(job->png, job->info, static_cast<png_uint_32>(s.width),
               static_cast<png_uint_32>(s.height), s.bit_depth, s.color_type,
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) {
    png_set_PLTE(job->png, job->info, s.palette.data(), static_cast<int>(s.palette.size()));
  }
  if (!s.alphas.empty()) {
    png_set_tRNS(job->png, job->info, s.alphas.data(), static_cast<int>(s.alphas.size()), nullptr);
  }
  png_write_info(job->png, job->info);
  png_write_image(job->png, job->rows);
  png_write_end(job->png, nullptr);
  return true;
}

}  // namespace detail

// The PNG file of `spec`, written with libpng's low-level API.
inline std::vector<uint8_t> WritePng(const PngSpec& spec) {
  std::vector<uint8_t> out;
  const size_t row_bytes = spec.rows.size() / static_cast<size_t>(spec.height);
  std::vector<png_bytep> rows;
  for (int y = 0; y < spec.height; ++y) {
    rows.push_back(const_cast<uint8_t*>(spec.rows.data()) + row_bytes * static_cast<size_t>(y));
  }
  detail::PngWriteJob job{&spec, &out, nullptr, nullptr, rows.data()};
  job.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, detail::PngWriteError, nullptr);
  job.info = png_create_info_struct(job.png);
  const bool ok = detail::PngWrite(&job);
  png_destroy_write_struct(&job.png, &job.info);
  EXPECT_TRUE(ok);
  return out;
}

// 8-bit gray, gray + alpha, RGB or RGBA `p` as a PNG.
inline std::vector<uint8_t> EncodePng(const Pixels& p, bool interlaced = false) {
  PngSpec spec;
  spec.width = p.width;
  spec.height = p.height;
  spec.color_type = p.channels == 1   ? PNG_COLOR_TYPE_GRAY
                    : p.channels == 2 ? PNG_COLOR_TYPE_GRAY_ALPHA
                    : p.channels == 3 ? PNG_COLOR_TYPE_RGB
                                      : PNG_COLOR_TYPE_RGBA;
  spec.interlaced = interlaced;
  spec.rows = p.data;
  return WritePng(spec);
}

// ---- JPEG -------------------------------------------------------------------------------------

namespace detail {

struct JpegWriteErrors {
  jpeg_error_mgr mgr;  // first: libjpeg passes &mgr, which we cast back
  std::jmp_buf jump;
};

struct JpegWriteJob {
  jpeg_compress_struct cinfo;
  JpegWriteErrors errors;
  const uint8_t* pixels;
  int width, height, components;
  J_COLOR_SPACE space;
  int quality;
  bool full_chroma;
  bool progressive;
  bool arithmetic;
  unsigned char* mem;
  unsigned long size;  // NOLINT(runtime/int)
};

inline void JpegWriteError(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  ADD_FAILURE() << "libjpeg (writing): " << message;
  std::longjmp(reinterpret_cast<JpegWriteErrors*>(cinfo->err)->jump, 1);
}

// The setjmp frame: no locals with destructors.
inline bool JpegWrite(JpegWriteJob* job) {
  if (setjmp(job->errors.jump) != 0) return false;
  jpeg_compress_struct& cinfo = job->cinfo;
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &job->mem, &job->size);
  cinfo.image_width = static_cast<JDIMENSION>(job->width);
  cinfo.image_height = static_cast<JDIMENSION>(job->height);
  cinfo.input_components = job->components;
  cinfo.in_color_space = job->space;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, job->quality, TRUE);
  if (job->full_chroma) {
    // 4:4:4: no chroma subsampling, so that quality 100 is nearly lossless.
    for (int c = 0; c < cinfo.num_components; ++c) {
      cinfo.comp_info[c].h_samp_factor = 1;
      cinfo.comp_info[c].v_samp_factor = 1;
    }
  }
  if (job->progressive) jpeg_simple_progression(&cinfo);  // with Huffman tables fitted to the image
  cinfo.arith_code = job->arithmetic ? TRUE : FALSE;
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(job->width) * static_cast<size_t>(job->components);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(job->pixels) + stride * cinfo.next_scanline;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  return true;
}

}  // namespace detail

// `p` (gray or RGB; or 4 components with `cmyk`) as a JPEG of `quality`, without chroma
// subsampling unless `subsample`, sequential unless `progressive`, Huffman-coded unless
// `arithmetic`.
inline std::vector<uint8_t> EncodeJpeg(const Pixels& p, int quality = 100, bool subsample = false,
                                       bool cmyk = false, bool progressive = false,
                                       bool arithmetic = false) {
  detail::JpegWriteJob job;
  std::memset(&job, 0, sizeof(job));
  job.cinfo.err = jpeg_std_error(&job.errors.mgr);
  job.errors.mgr.error_exit = detail::JpegWriteError;
  job.pixels = p.data.data();
  job.width = p.width;
  job.height = p.height;
  job.components = p.channels;
  job.space = cmyk ? JCS_CMYK : p.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  job.quality = quality;
  job.full_chroma = !subsample;
  job.progressive = progressive;
  job.arithmetic = arithmetic;
  const bool ok = detail::JpegWrite(&job);
  jpeg_destroy_compress(&job.cinfo);
  std::vector<uint8_t> out;
  if (ok) out.assign(job.mem, job.mem + job.size);
  std::free(job.mem);  // NOLINT: allocated by libjpeg's jpeg_mem_dest with malloc
  EXPECT_TRUE(ok);
  return out;
}

}  // namespace cortado::testing

#endif  // CORTADO_WITH_IMAGES
