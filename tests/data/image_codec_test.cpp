// SPDX-License-Identifier: Apache-2.0
#include "data/image_codec.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "data/data_layer.hpp"
#include "data/data_test_util.hpp"
#include "layers/layer.hpp"
#include "support/gradient_checker.hpp"

#if CORTADO_WITH_IMAGES
#include <jpeglib.h>
#include <png.h>
#endif

namespace cortado {
namespace {

#if CORTADO_WITH_IMAGES

// An RGB(A) or gray image, interleaved, as the encoders take it.
struct Pixels {
  int width, height, channels;
  std::vector<uint8_t> data;
};

std::vector<uint8_t> EncodePng(const Pixels& p, bool sixteen_bit = false) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(p.width);
  image.height = static_cast<png_uint_32>(p.height);
  image.format = p.channels == 1   ? PNG_FORMAT_GRAY
                 : p.channels == 3 ? PNG_FORMAT_RGB
                                   : PNG_FORMAT_RGBA;
  std::vector<uint16_t> wide;
  const void* buffer = p.data.data();
  if (sixteen_bit) {
    // Linear 16-bit: v * 257 is the 8-bit value v exactly after libpng's conversion back.
    image.format |= PNG_FORMAT_FLAG_LINEAR;
    wide.assign(p.data.begin(), p.data.end());
    for (uint16_t& v : wide) v = static_cast<uint16_t>(v * 257);
    buffer = wide.data();
  }
  png_alloc_size_t size = 0;
  EXPECT_NE(png_image_write_to_memory(&image, nullptr, &size, 0, buffer, 0, nullptr), 0)
      << image.message;
  std::vector<uint8_t> out(size);
  EXPECT_NE(png_image_write_to_memory(&image, out.data(), &size, 0, buffer, 0, nullptr), 0)
      << image.message;
  out.resize(size);
  return out;
}

std::vector<uint8_t> EncodeJpeg(const Pixels& p, int quality = 100) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* mem = nullptr;
  unsigned long size = 0;  // NOLINT(runtime/int)
  jpeg_mem_dest(&cinfo, &mem, &size);
  cinfo.image_width = static_cast<JDIMENSION>(p.width);
  cinfo.image_height = static_cast<JDIMENSION>(p.height);
  cinfo.input_components = p.channels;
  cinfo.in_color_space = p.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(p.width) * p.channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(p.data.data()) + stride * cinfo.next_scanline;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out(mem, mem + size);
  std::free(mem);
  return out;
}

// A flat image of one color per pixel block: every pixel (r, g, b).
Pixels Flat(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  Pixels p{width, height, 3, {}};
  for (int i = 0; i < width * height; ++i) p.data.insert(p.data.end(), {r, g, b});
  return p;
}

// A small RGB image with distinct values: pixel i is (i, 100 + i, 200 - i).
Pixels Ramp(int width, int height) {
  Pixels p{width, height, 3, {}};
  for (int i = 0; i < width * height; ++i) {
    p.data.insert(p.data.end(), {static_cast<uint8_t>(i), static_cast<uint8_t>(100 + i),
                                 static_cast<uint8_t>(200 - i)});
  }
  return p;
}

DecodedImage Decode(const std::vector<uint8_t>& bytes, ColorMode mode = ColorMode::kKeep) {
  return DecodeImage(bytes.data(), bytes.size(), mode, "image 'x'");
}

// The code and message of decoding `bytes`, which must fail.
std::pair<ErrorCode, std::string> Failure(const std::vector<uint8_t>& bytes) {
  try {
    Decode(bytes);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  ADD_FAILURE() << "decoding succeeded";
  return {ErrorCode::kInternal, ""};
}

TEST(ImageCodecTest, PngColorDecodesExactlyToPlanarBgr) {
  const Pixels ramp = Ramp(3, 2);
  const DecodedImage image = Decode(EncodePng(ramp));
  ASSERT_EQ(image.channels, 3);
  ASSERT_EQ(image.height, 2);
  ASSERT_EQ(image.width, 3);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(image.pixels[0 * 6 + i], 200 - i) << "blue plane, pixel " << i;
    EXPECT_EQ(image.pixels[1 * 6 + i], 100 + i) << "green plane, pixel " << i;
    EXPECT_EQ(image.pixels[2 * 6 + i], i) << "red plane, pixel " << i;
  }
  // A 16-bit file (written here as linear light, with its gamma chunk) decodes to 8-bit sRGB:
  // the shape and the order of the values hold, the values are gamma-encoded.
  const DecodedImage wide = Decode(EncodePng(ramp, /*sixteen_bit=*/true));
  ASSERT_EQ(wide.channels, 3);
  ASSERT_EQ(wide.height, 2);
  ASSERT_EQ(wide.width, 3);
  for (int i = 0; i + 1 < 6; ++i) {
    EXPECT_GE(wide.pixels[0 * 6 + i], wide.pixels[0 * 6 + i + 1]) << "blue does not rise";
    EXPECT_LT(wide.pixels[2 * 6 + i], wide.pixels[2 * 6 + i + 1]) << "red rises";
  }
  EXPECT_GT(wide.pixels[0], wide.pixels[5]);
}

TEST(ImageCodecTest, PngGrayAlphaAndTheColorModes) {
  Pixels gray{2, 2, 1, {0, 50, 100, 255}};
  const DecodedImage kept = Decode(EncodePng(gray));
  EXPECT_EQ(kept.channels, 1);
  EXPECT_EQ(kept.pixels, gray.data);
  const DecodedImage color = Decode(EncodePng(gray), ColorMode::kColor);
  ASSERT_EQ(color.channels, 3);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(std::vector<uint8_t>(color.pixels.begin() + 4 * c, color.pixels.begin() + 4 * c + 4),
              gray.data);
  }
  // Color to gray: Y = 0.299 R + 0.587 G + 0.114 B, rounded: (200, 100, 50) -> 124.1 -> 124.
  const DecodedImage luma = Decode(EncodePng(Flat(2, 1, 200, 100, 50)), ColorMode::kGray);
  ASSERT_EQ(luma.channels, 1);
  EXPECT_EQ(luma.pixels, (std::vector<uint8_t>{124, 124}));
  // Opaque RGBA: the alpha channel is dropped.
  Pixels rgba{1, 1, 4, {10, 20, 30, 255}};
  const DecodedImage opaque = Decode(EncodePng(rgba));
  EXPECT_EQ(opaque.channels, 3);
  EXPECT_EQ(opaque.pixels, (std::vector<uint8_t>{30, 20, 10}));
}

TEST(ImageCodecTest, JpegDecodesWithinItsLoss) {
  const DecodedImage color = Decode(EncodeJpeg(Flat(16, 8, 220, 120, 30)));
  ASSERT_EQ(color.channels, 3);
  ASSERT_EQ(color.height, 8);
  ASSERT_EQ(color.width, 16);
  const int expected[3] = {30, 120, 220};  // B, G, R
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 128; ++i) EXPECT_NEAR(color.pixels[c * 128 + i], expected[c], 3);
  }
  const DecodedImage gray = Decode(EncodeJpeg(Flat(8, 8, 220, 120, 30)), ColorMode::kGray);
  ASSERT_EQ(gray.channels, 1);
  // libjpeg's luma of (220, 120, 30): 0.299 * 220 + 0.587 * 120 + 0.114 * 30 = 139.6.
  for (uint8_t v : gray.pixels) EXPECT_NEAR(v, 140, 3);
  Pixels g{8, 8, 1, std::vector<uint8_t>(64, 77)};
  const DecodedImage kept = Decode(EncodeJpeg(g));
  EXPECT_EQ(kept.channels, 1);
  for (uint8_t v : kept.pixels) EXPECT_NEAR(v, 77, 2);
  EXPECT_EQ(Decode(EncodeJpeg(g), ColorMode::kColor).channels, 3);
}

TEST(ImageCodecTest, CorruptTruncatedAndForeignBytesAreErrorsNamingTheImage) {
  const std::vector<uint8_t> jpeg = EncodeJpeg(Ramp(16, 16), 90);
  const std::vector<uint8_t> png = EncodePng(Ramp(16, 16));
  const std::vector<std::vector<uint8_t>> bad = {
      std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + static_cast<long>(jpeg.size() / 2)),
      std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + 4),
      std::vector<uint8_t>(png.begin(), png.begin() + static_cast<long>(png.size() / 2)),
      std::vector<uint8_t>(png.begin(), png.begin() + 12),
      {0x12, 0x34, 0x56, 0x78, 0x9a},
      {},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const auto [code, message] = Failure(bad[i]);
    EXPECT_EQ(code, ErrorCode::kParse) << "case " << i << ": " << message;
    EXPECT_EQ(message.rfind("image 'x': ", 0), 0u) << "case " << i << ": " << message;
  }
  EXPECT_NE(Failure(bad[4]).second.find("not a JPEG or PNG image (first bytes 12 34 56 78"),
            std::string::npos);
  EXPECT_NE(Failure(bad[0]).second.find("corrupt JPEG data"), std::string::npos);
  EXPECT_NE(Failure(bad[2]).second.find("corrupt PNG data"), std::string::npos);
  EXPECT_TRUE(LooksLikeEncodedImage(jpeg.data(), jpeg.size()));
  EXPECT_TRUE(LooksLikeEncodedImage(png.data(), png.size()));
  EXPECT_FALSE(LooksLikeEncodedImage(bad[4].data(), bad[4].size()));
}

TEST(DataLayerImagesTest, PngEncodedRecordsGiveTheBatchOfTheSameRawRecords) {
  testing::TempDir dir;
  std::vector<std::pair<std::string, std::string>> raw_records, png_records;
  for (int i = 0; i < 4; ++i) {
    Pixels p = Ramp(3, 2);
    for (uint8_t& v : p.data) v = static_cast<uint8_t>(v + 7 * i);
    const DecodedImage planar = Decode(EncodePng(p));
    caffe::Datum raw;
    raw.set_channels(3);
    raw.set_height(2);
    raw.set_width(3);
    raw.set_data(std::string(planar.pixels.begin(), planar.pixels.end()));
    raw.set_label(i);
    raw_records.emplace_back(testing::Key(i), raw.SerializeAsString());
    const std::vector<uint8_t> bytes = EncodePng(p);
    caffe::Datum encoded;
    encoded.set_encoded(true);
    encoded.set_data(std::string(bytes.begin(), bytes.end()));
    encoded.set_label(i);
    png_records.emplace_back(testing::Key(i), encoded.SerializeAsString());
  }
  png_records.emplace_back("zz_corrupt.png", [] {
    caffe::Datum d;
    d.set_encoded(true);
    d.set_data("\x89PNG\r\n\x1a\n truncated");
    return d.SerializeAsString();
  }());
  testing::WriteLmdb(dir / "raw", raw_records);
  testing::WriteLmdb(dir / "png", png_records);
  auto batch = [&](const std::string& db, int size) {
    Context ctx(Device::Cpu(), 1701);
    auto layer = CreateLayer(testing::LayerParam("name: 'd' type: 'Data' top: 'data' top: 'label' "
                                                 "data_param { source: '" +
                                                 db + "' batch_size: " + std::to_string(size) +
                                                 " backend: LMDB } "
                                                 "transform_param { scale: 0.5 }"),
                             &ctx);
    Tensor data, label;
    layer->Initialize({}, {&data, &label});
    layer->Forward({}, {&data, &label});
    std::vector<float> values(data.cpu_data(), data.cpu_data() + data.count());
    values.insert(values.end(), label.cpu_data(), label.cpu_data() + label.count());
    return values;
  };
  EXPECT_EQ(batch(dir / "png", 4), batch(dir / "raw", 4));
  try {
    batch(dir / "png", 5);  // the fifth record is corrupt
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("record 'zz_corrupt.png' of LMDB database"), std::string::npos) << msg;
    EXPECT_NE(msg.find("corrupt PNG data"), std::string::npos) << msg;
  }
}

#else

TEST(ImageCodecTest, WithoutCodecsAnEncodedImageIsUnimplemented) {
  const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  try {
    DecodeImage(png, sizeof(png), ColorMode::kKeep, "image 'x'");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  }
}

#endif  // CORTADO_WITH_IMAGES

TEST(ImageCodecTest, ResizeIsBilinearWithHalfPixelCentres) {
  // 2 x 2 -> 4 x 4: source taps per axis (0, 0), (0, .25), (0, .75), (1, 0) (hand-computed from
  // s = (d + 0.5) / 2 - 0.5, clamped at the edges).
  DecodedImage small{1, 2, 2, {0, 100, 200, 40}};
  const DecodedImage up = ResizeImage(small, 4, 4);
  EXPECT_EQ(up.pixels, (std::vector<uint8_t>{0, 25, 75, 100,    //
                                             50, 59, 76, 85,    //
                                             150, 126, 79, 55,  //
                                             200, 160, 80, 40}));
  // 4 x 4 (v = 16 y + 4 x) -> 2 x 2: each output is the mean of a 2 x 2 block.
  DecodedImage big{1, 4, 4, {}};
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) big.pixels.push_back(static_cast<uint8_t>(16 * y + 4 * x));
  }
  const DecodedImage down = ResizeImage(big, 2, 2);
  EXPECT_EQ(down.pixels, (std::vector<uint8_t>{10, 18, 42, 50}));
  // Planes are resized independently.
  DecodedImage two{2, 1, 1, {9, 200}};
  EXPECT_EQ(ResizeImage(two, 2, 2).pixels, (std::vector<uint8_t>{9, 9, 9, 9, 200, 200, 200, 200}));
}

}  // namespace
}  // namespace cortado
