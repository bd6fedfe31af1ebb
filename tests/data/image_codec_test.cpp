// SPDX-License-Identifier: Apache-2.0
#include "data/image_codec.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "data/image_test_util.hpp"

#if CORTADO_WITH_IMAGES
#include <zlib.h>
#endif

namespace cortado {
namespace {

// The code and message of decoding `size` bytes at `bytes` as "image 'x'", which must fail.
std::pair<ErrorCode, std::string> Failure(const void* bytes, size_t size,
                                          ColorMode mode = ColorMode::kKeep) {
  try {
    DecodeImage(bytes, size, mode, "image 'x'");
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  ADD_FAILURE() << "decoding succeeded";
  return {ErrorCode::kInternal, ""};
}

std::pair<ErrorCode, std::string> Failure(const std::vector<uint8_t>& bytes) {
  return Failure(bytes.data(), bytes.size());
}

#if CORTADO_WITH_IMAGES

using testing::EncodeJpeg;
using testing::EncodePng;
using testing::Flat;
using testing::Pixels;
using testing::PlanarBgr;
using testing::PngSpec;
using testing::Ramp;
using testing::WritePng;

DecodedImage Decode(const std::vector<uint8_t>& bytes, ColorMode mode = ColorMode::kKeep) {
  return DecodeImage(bytes.data(), bytes.size(), mode, "image 'x'");
}

// Every value of `image` is within `tolerance` of `expected`'s (same shape).
void ExpectNear(const DecodedImage& image, const std::vector<uint8_t>& expected, int tolerance) {
  ASSERT_EQ(image.pixels.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(image.pixels[i], expected[i], tolerance) << "value " << i;
  }
}

TEST(ImageCodecTest, CodecsAreAvailable) { EXPECT_TRUE(ImageCodecsAvailable()); }

TEST(ImageCodecTest, PngRgbDecodesExactlyToPlanarBgr) {
  const DecodedImage image = Decode(EncodePng(Ramp(3, 2)));
  ASSERT_EQ(image.channels, 3);
  ASSERT_EQ(image.height, 2);
  ASSERT_EQ(image.width, 3);
  // Pixel i is (R, G, B) = (i, 100 + i, 200 - i): planes B, G, R.
  EXPECT_EQ(image.pixels, (std::vector<uint8_t>{200, 199, 198, 197, 196, 195,  //
                                                100, 101, 102, 103, 104, 105,  //
                                                0, 1, 2, 3, 4, 5}));
  // Interlaced (Adam7, all seven passes for 5 x 7) decodes to the same pixels.
  const Pixels ramp = Ramp(5, 7);
  EXPECT_EQ(Decode(EncodePng(ramp, /*interlaced=*/true)).pixels, PlanarBgr(ramp));
  EXPECT_EQ(Decode(EncodePng(ramp)).pixels, PlanarBgr(ramp));
}

TEST(ImageCodecTest, PureRedIsTheThirdPlane) {
  const DecodedImage png = Decode(EncodePng(Flat(2, 2, 255, 0, 0)));
  ASSERT_EQ(png.channels, 3);
  EXPECT_EQ(png.pixels, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255}));
  const DecodedImage jpeg = Decode(EncodeJpeg(Flat(8, 8, 255, 0, 0)));
  ASSERT_EQ(jpeg.channels, 3);
  std::vector<uint8_t> red(64 * 3, 0);
  std::fill(red.begin() + 128, red.end(), 255);
  ExpectNear(jpeg, red, 3);
}

TEST(ImageCodecTest, PngGrayOfEveryDepth) {
  // 8 bits, kept as one plane; kColor replicates it into B, G and R; kGray keeps it.
  const Pixels gray{2, 2, 1, {0, 50, 100, 255}};
  const DecodedImage kept = Decode(EncodePng(gray));
  EXPECT_EQ(kept.channels, 1);
  EXPECT_EQ(kept.pixels, gray.data);
  const DecodedImage color = Decode(EncodePng(gray), ColorMode::kColor);
  EXPECT_EQ(color.channels, 3);
  EXPECT_EQ(color.pixels,
            (std::vector<uint8_t>{0, 50, 100, 255, 0, 50, 100, 255, 0, 50, 100, 255}));
  EXPECT_EQ(Decode(EncodePng(gray), ColorMode::kGray).pixels, gray.data);

  PngSpec spec;
  spec.color_type = PNG_COLOR_TYPE_GRAY;
  spec.height = 1;
  // 1 bit: 1011 0000 -> 255 0 255 255 0 0 0 0.
  spec.width = 8;
  spec.bit_depth = 1;
  spec.rows = {0xb0};
  EXPECT_EQ(Decode(WritePng(spec)).pixels, (std::vector<uint8_t>{255, 0, 255, 255, 0, 0, 0, 0}));
  // 2 bits: 00 01 10 11 -> v * 85.
  spec.width = 4;
  spec.bit_depth = 2;
  spec.rows = {0x1b};
  EXPECT_EQ(Decode(WritePng(spec)).pixels, (std::vector<uint8_t>{0, 85, 170, 255}));
  // 4 bits: 0 1 7 15 -> v * 17.
  spec.bit_depth = 4;
  spec.rows = {0x01, 0x7f};
  EXPECT_EQ(Decode(WritePng(spec)).pixels, (std::vector<uint8_t>{0, 17, 119, 255}));
  // 16 bits: the high byte, 0x12ff -> 0x12, 0xab00 -> 0xab.
  spec.width = 2;
  spec.bit_depth = 16;
  spec.rows = {0x12, 0xff, 0xab, 0x00};
  EXPECT_EQ(Decode(WritePng(spec)).pixels, (std::vector<uint8_t>{0x12, 0xab}));
}

TEST(ImageCodecTest, Png16BitColorKeepsTheHighByte) {
  PngSpec spec;
  spec.width = 2;
  spec.height = 1;
  spec.bit_depth = 16;
  // (R, G, B) = (0x12ff, 0x0080, 0xffff), (0xab00, 0x7f7f, 0x0001), big-endian.
  spec.rows = {0x12, 0xff, 0x00, 0x80, 0xff, 0xff, 0xab, 0x00, 0x7f, 0x7f, 0x00, 0x01};
  EXPECT_EQ(Decode(WritePng(spec)).pixels,
            (std::vector<uint8_t>{0xff, 0x00, 0x00, 0x7f, 0x12, 0xab}));
  // RGBA: the same colors with alphas 0x0000 and 0x8000, which are dropped.
  spec.color_type = PNG_COLOR_TYPE_RGBA;
  spec.rows = {0x12, 0xff, 0x00, 0x80, 0xff, 0xff, 0x00, 0x00,
               0xab, 0x00, 0x7f, 0x7f, 0x00, 0x01, 0x80, 0x00};
  const DecodedImage rgba = Decode(WritePng(spec));
  EXPECT_EQ(rgba.channels, 3);
  EXPECT_EQ(rgba.pixels, (std::vector<uint8_t>{0xff, 0x00, 0x00, 0x7f, 0x12, 0xab}));
}

TEST(ImageCodecTest, PngAlphaIsDroppedNotComposited) {
  // Opaque, transparent and half-transparent pixels keep their colors.
  const Pixels rgba{3, 1, 4, {10, 20, 30, 255, 40, 50, 60, 0, 70, 80, 90, 128}};
  const DecodedImage color = Decode(EncodePng(rgba));
  EXPECT_EQ(color.channels, 3);
  EXPECT_EQ(color.pixels, (std::vector<uint8_t>{30, 60, 90, 20, 50, 80, 10, 40, 70}));
  const Pixels gray_alpha{2, 1, 2, {77, 0, 200, 128}};
  const DecodedImage gray = Decode(EncodePng(gray_alpha));
  EXPECT_EQ(gray.channels, 1);
  EXPECT_EQ(gray.pixels, (std::vector<uint8_t>{77, 200}));
  EXPECT_EQ(Decode(EncodePng(gray_alpha), ColorMode::kColor).pixels,
            (std::vector<uint8_t>{77, 200, 77, 200, 77, 200}));
}

TEST(ImageCodecTest, PngPaletteExpandsToColor) {
  PngSpec spec;
  spec.color_type = PNG_COLOR_TYPE_PALETTE;
  spec.palette = {{255, 0, 0}, {0, 128, 255}, {10, 20, 30}};
  spec.width = 3;
  spec.height = 1;
  spec.rows = {2, 0, 1};
  // Pixels (10, 20, 30), (255, 0, 0), (0, 128, 255) as B, G, R planes.
  const std::vector<uint8_t> expected{30, 0, 255, 20, 0, 128, 10, 255, 0};
  const DecodedImage image = Decode(WritePng(spec));
  EXPECT_EQ(image.channels, 3);
  EXPECT_EQ(image.pixels, expected);
  // A tRNS chunk (entry 1 transparent, entry 0 half) changes nothing: alpha is dropped.
  spec.alphas = {128, 0};
  const DecodedImage transparent = Decode(WritePng(spec));
  EXPECT_EQ(transparent.channels, 3);
  EXPECT_EQ(transparent.pixels, expected);
  // Gray from the palette's colors: 0.299 R + 0.587 G + 0.114 B rounded:
  // (10, 20, 30) -> 18.15 -> 18; (255, 0, 0) -> 76.245 -> 76; (0, 128, 255) -> 104.206 -> 104.
  const DecodedImage gray = Decode(WritePng(spec), ColorMode::kGray);
  EXPECT_EQ(gray.channels, 1);
  EXPECT_EQ(gray.pixels, (std::vector<uint8_t>{18, 76, 104}));
  // 2-bit indices 0 1 2 1 (0001 1001).
  spec.alphas.clear();
  spec.bit_depth = 2;
  spec.width = 4;
  spec.rows = {0x19};
  EXPECT_EQ(Decode(WritePng(spec)).pixels,
            (std::vector<uint8_t>{0, 255, 30, 255, 0, 128, 20, 128, 255, 0, 10, 0}));
}

TEST(ImageCodecTest, ColorToGrayIsBt601RoundedToNearest) {
  // Y = 0.299 R + 0.587 G + 0.114 B: red 76.245 -> 76, green 149.685 -> 150 (truncating would
  // give 149), blue 29.07 -> 29, (200, 100, 50) 124.2 -> 124.
  const Pixels p{4, 1, 3, {255, 0, 0, 0, 255, 0, 0, 0, 255, 200, 100, 50}};
  const DecodedImage gray = Decode(EncodePng(p), ColorMode::kGray);
  ASSERT_EQ(gray.channels, 1);
  EXPECT_EQ(gray.pixels, (std::vector<uint8_t>{76, 150, 29, 124}));
}

TEST(ImageCodecTest, ChannelsOfEachColorMode) {
  const Pixels gray{8, 8, 1, std::vector<uint8_t>(64, 77)};
  const Pixels color = Ramp(8, 8);
  const std::vector<std::vector<uint8_t>> gray_files = {EncodePng(gray), EncodeJpeg(gray)};
  const std::vector<std::vector<uint8_t>> color_files = {EncodePng(color), EncodeJpeg(color)};
  for (const auto& file : gray_files) {
    EXPECT_EQ(Decode(file, ColorMode::kKeep).channels, 1);
    EXPECT_EQ(Decode(file, ColorMode::kColor).channels, 3);
    EXPECT_EQ(Decode(file, ColorMode::kGray).channels, 1);
  }
  for (const auto& file : color_files) {
    EXPECT_EQ(Decode(file, ColorMode::kKeep).channels, 3);
    EXPECT_EQ(Decode(file, ColorMode::kColor).channels, 3);
    EXPECT_EQ(Decode(file, ColorMode::kGray).channels, 1);
  }
}

TEST(ImageCodecTest, JpegQuality100IsWithinASmallTolerance) {
  // A smooth color image (R = 16 x, G = 16 y, B = 128) at quality 100 without chroma
  // subsampling.
  Pixels p{16, 16, 3, {}};
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      testing::Append(&p.data, {static_cast<uint8_t>(16 * x), static_cast<uint8_t>(16 * y), 128});
    }
  }
  const DecodedImage color = Decode(EncodeJpeg(p));
  ASSERT_EQ(color.channels, 3);
  ASSERT_EQ(color.height, 16);
  ASSERT_EQ(color.width, 16);
  ExpectNear(color, PlanarBgr(p), 3);
  // Forced to gray: libjpeg's luma, near the BT.601 luma of the pixels.
  std::vector<uint8_t> luma;
  for (size_t i = 0; i < p.data.size(); i += 3) {
    luma.push_back(static_cast<uint8_t>(
        (299 * p.data[i] + 587 * p.data[i + 1] + 114 * p.data[i + 2] + 500) / 1000));
  }
  ExpectNear(Decode(EncodeJpeg(p), ColorMode::kGray), luma, 3);
  // A gray JPEG stays one plane; kColor gives three copies of it.
  Pixels g{8, 8, 1, {}};
  for (int i = 0; i < 64; ++i) g.data.push_back(static_cast<uint8_t>(3 * i));
  const DecodedImage kept = Decode(EncodeJpeg(g));
  ASSERT_EQ(kept.channels, 1);
  ExpectNear(kept, g.data, 2);
  std::vector<uint8_t> three = kept.pixels;
  testing::Append(&three, kept.pixels);
  testing::Append(&three, kept.pixels);
  EXPECT_EQ(Decode(EncodeJpeg(g), ColorMode::kColor).pixels, three);
  // Usual settings (quality 90, 4:2:0 chroma) decode to the right shape.
  const DecodedImage usual = Decode(EncodeJpeg(Ramp(13, 7), 90, /*subsample=*/true));
  EXPECT_EQ(usual.channels, 3);
  EXPECT_EQ(usual.height, 7);
  EXPECT_EQ(usual.width, 13);
}

TEST(ImageCodecTest, TruncatedCorruptAndForeignBytesAreErrorsNamingTheImage) {
  const std::vector<uint8_t> jpeg = EncodeJpeg(Ramp(16, 16), 90);
  const std::vector<uint8_t> png = EncodePng(Ramp(16, 16));
  auto head = [](const std::vector<uint8_t>& bytes, size_t n) {
    return std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
  };
  // A byte of the first IDAT chunk's data changed: its CRC no longer matches.
  std::vector<uint8_t> bad_crc = png;
  for (size_t i = 8; i + 8 < bad_crc.size(); ++i) {
    if (std::string(bad_crc.begin() + static_cast<std::ptrdiff_t>(i),
                    bad_crc.begin() + static_cast<std::ptrdiff_t>(i + 4)) == "IDAT") {
      bad_crc[i + 6] ^= 0x55;
      break;
    }
  }
  std::mt19937 engine(1701);
  std::vector<uint8_t> random_after_soi = {0xff, 0xd8, 0xff};
  for (int i = 0; i < 200; ++i) random_after_soi.push_back(static_cast<uint8_t>(engine()));
  std::vector<uint8_t> random_bytes = {0x12};
  for (int i = 0; i < 200; ++i) random_bytes.push_back(static_cast<uint8_t>(engine()));

  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"truncated JPEG", head(jpeg, jpeg.size() / 2), "corrupt JPEG data: Premature end of JPEG"},
      {"JPEG header only", head(jpeg, 4), "corrupt JPEG data: "},
      {"JPEG signature only", head(jpeg, 3), "corrupt JPEG data: "},
      {"JPEG without its end marker", head(jpeg, jpeg.size() - 2), "corrupt JPEG data: "},
      {"random bytes after a JPEG signature", random_after_soi, "corrupt JPEG data: "},
      {"truncated PNG", head(png, png.size() / 2), "corrupt PNG data: "},
      {"PNG signature and part of IHDR", head(png, 12), "corrupt PNG data: "},
      {"PNG signature only", head(png, 8), "corrupt PNG data: "},
      {"PNG without IEND", head(png, png.size() - 12), "corrupt PNG data: "},
      {"PNG with a bad CRC", bad_crc, "corrupt PNG data: "},
      {"random bytes", random_bytes, "not a JPEG or PNG image (first bytes 12 "},
      {"five bytes",
       {0x12, 0x34, 0x56, 0x78, 0x9a},
       "not a JPEG or PNG image (first bytes 12 34 56 78, 5 bytes in all)"},
      {"empty", {}, "no image data (0 bytes)"},
  };
  for (const Case& c : cases) {
    for (ColorMode mode : {ColorMode::kKeep, ColorMode::kColor, ColorMode::kGray}) {
      const auto [code, message] = Failure(c.bytes.data(), c.bytes.size(), mode);
      EXPECT_EQ(code, ErrorCode::kParse) << c.name << ": " << message;
      EXPECT_EQ(message.rfind(std::string("image 'x': ") + c.says, 0), 0u)
          << c.name << ": " << message;
    }
  }
  EXPECT_EQ(Failure(nullptr, 0).second, "image 'x': no image data (0 bytes)");
  EXPECT_TRUE(LooksLikeEncodedImage(jpeg.data(), jpeg.size()));
  EXPECT_TRUE(LooksLikeEncodedImage(png.data(), png.size()));
  EXPECT_FALSE(LooksLikeEncodedImage(random_bytes.data(), random_bytes.size()));
  EXPECT_FALSE(LooksLikeEncodedImage(nullptr, 0));
}

TEST(ImageCodecTest, CmykAndHugeImagesAreRefused) {
  const Pixels cmyk{8, 8, 4, std::vector<uint8_t>(256, 100)};
  auto [code, message] = Failure(EncodeJpeg(cmyk, 90, false, /*cmyk=*/true));
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << message;
  EXPECT_EQ(message.rfind("image 'x': a CMYK JPEG image", 0), 0u) << message;
  // 1 x 40000: wider than 32768. The files are small; the check comes before the pixels.
  const Pixels wide{40000, 1, 1, std::vector<uint8_t>(40000, 9)};
  for (const std::vector<uint8_t>& file : {EncodePng(wide), EncodeJpeg(wide)}) {
    std::tie(code, message) = Failure(file);
    EXPECT_EQ(code, ErrorCode::kInvalidArgument) << message;
    EXPECT_EQ(message.rfind("image 'x': a ", 0), 0u) << message;
    EXPECT_NE(message.find("image of 1 x 40000 pixels"), std::string::npos) << message;
  }
  // A header claiming 2 x 3000000 pixels (over libpng's own limit too), then the start of an
  // IDAT chunk: refused before any pixel is read.
  std::vector<uint8_t> ihdr = {'I', 'H', 'D', 'R', 0, 0x2d, 0xc6, 0xc0, 0, 0, 0, 2, 8, 0, 0, 0, 0};
  const uLong crc = crc32(0, ihdr.data(), static_cast<uInt>(ihdr.size()));
  std::vector<uint8_t> huge = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
  testing::Append(&huge, ihdr);
  for (int shift = 24; shift >= 0; shift -= 8) huge.push_back(static_cast<uint8_t>(crc >> shift));
  testing::Append(&huge, {0, 0, 0, 0, 'I', 'D', 'A', 'T'});
  std::tie(code, message) = Failure(huge);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << message;
  EXPECT_NE(message.find("a PNG image of 2 x 3000000 pixels"), std::string::npos) << message;
  // The largest side accepted decodes.
  const Pixels widest{32768, 1, 1, std::vector<uint8_t>(32768, 9)};
  EXPECT_EQ(Decode(EncodePng(widest)).width, 32768);
}

// A Huffman-coded JPEG takes at least a bit per block of some component: a file shorter than
// that for the size its header claims is refused before its pixels are allocated (a 422-byte
// file claiming 24579 x 6916 pixels, found by fuzzing, had 510 MB allocated and filled first).
// Arithmetic coding has no such bound, and a smaller limit on its size instead.
TEST(ImageCodecTest, AJpegTooShortForItsSizeIsRefusedBeforeItsPixels) {
  // The smallest files of their size there are: one flat gray, sequential and progressive (whose
  // Huffman tables are fitted to the image), 4096 x 1024 (65,536 blocks, so at least 8,192
  // bytes). They decode: the bound is below them.
  const Pixels flat{4096, 1024, 1, std::vector<uint8_t>(4096 * 1024, 77)};
  for (bool progressive : {false, true}) {
    const std::vector<uint8_t> file = EncodeJpeg(flat, 50, false, false, progressive);
    SCOPED_TRACE(::testing::Message() << (progressive ? "progressive" : "sequential") << ", "
                                      << file.size() << " bytes");
    const DecodedImage image = Decode(file);
    EXPECT_EQ(image.width, 4096);
    EXPECT_EQ(image.height, 1024);
    EXPECT_NEAR(image.pixels[4096 * 1024 - 1], 77, 2);  // quality 50's rounding
  }
  // A 16 x 16 file whose header is made to claim 16384 x 16384 (4,194,304 blocks, at least
  // 524,288 bytes), with a color image's three components, each way of coding it.
  struct Coding {
    bool progressive, arithmetic;
    uint8_t sof;  // its start-of-frame marker
    const char* says;
  };
  const std::string bomb =
      "image 'x': corrupt JPEG data: truncated: {} bytes cannot hold a 16384 "
      "x 16384 image (height x width; Huffman-coded, it takes at least "
      "524288 bytes)";
  const std::string arith =
      "image 'x': an arithmetic-coded JPEG of 16384 x 16384 pixels (height x width), 1536 MiB of "
      "coefficients; supported are at most 64 MiB for this coding";
  for (const Coding& coding : {
           Coding{false, false, 0xc0, bomb.c_str()},
           Coding{true, false, 0xc2, bomb.c_str()},
           // Arithmetic coding has no length bound (the 16 x 16 file decoded to 16384 x 16384
           // of zeros, in 9 s): a bound on its coefficients, 3 x 4,194,304 blocks of 128 bytes.
           Coding{false, true, 0xc9, arith.c_str()},
           Coding{true, true, 0xca, arith.c_str()},
       }) {
    std::vector<uint8_t> file =
        EncodeJpeg(Ramp(16, 16), 90, false, false, coding.progressive, coding.arithmetic);
    SCOPED_TRACE(::testing::Message() << "SOF 0x" << std::hex << int{coding.sof});
    size_t at = 2;
    while (at + 9 < file.size() && !(file[at] == 0xff && file[at + 1] == coding.sof)) ++at;
    ASSERT_LT(at + 9, file.size()) << "no start-of-frame marker";
    EXPECT_EQ(Decode(file).width, 16);   // as encoded
    for (size_t i : {at + 5, at + 7}) {  // height, then width, big-endian
      file[i] = 0x40;
      file[i + 1] = 0x00;
    }
    const auto [code, message] = Failure(file);
    EXPECT_EQ(code, coding.arithmetic ? ErrorCode::kInvalidArgument : ErrorCode::kParse) << message;
    EXPECT_EQ(message.rfind(fmt::format(fmt::runtime(coding.says), file.size()), 0), 0u) << message;
  }
  // Arithmetic-coded images within the bound decode.
  const Pixels color = Flat(1024, 512, 10, 200, 30);
  for (bool progressive : {false, true}) {
    const DecodedImage image = Decode(EncodeJpeg(color, 90, false, false, progressive, true));
    EXPECT_EQ(image.width, 1024);
    EXPECT_NEAR(image.pixels[0], 30, 3);  // blue plane first
  }
}

#else

CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, CodecsAreAvailable)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, PngRgbDecodesExactlyToPlanarBgr)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, PureRedIsTheThirdPlane)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, PngGrayOfEveryDepth)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, Png16BitColorKeepsTheHighByte)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, PngAlphaIsDroppedNotComposited)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, PngPaletteExpandsToColor)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, ColorToGrayIsBt601RoundedToNearest)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, ChannelsOfEachColorMode)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, JpegQuality100IsWithinASmallTolerance)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, TruncatedCorruptAndForeignBytesAreErrorsNamingTheImage)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, CmykAndHugeImagesAreRefused)
CORTADO_SKIP_WITHOUT_IMAGES(ImageCodecTest, AJpegTooShortForItsSizeIsRefusedBeforeItsPixels)

TEST(ImageCodecTest, WithoutCodecsAnEncodedImageIsUnimplemented) {
  EXPECT_FALSE(ImageCodecsAvailable());
  const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const auto [code, message] = Failure(png, sizeof(png));
  EXPECT_EQ(code, ErrorCode::kUnimplemented);
  EXPECT_EQ(message.rfind("image 'x': ", 0), 0u) << message;
  EXPECT_NE(message.find("WITH_IMAGES=OFF"), std::string::npos) << message;
  // Bytes that are no image are kParse in every build.
  EXPECT_EQ(Failure(std::vector<uint8_t>{1, 2, 3}).first, ErrorCode::kParse);
}

#endif  // CORTADO_WITH_IMAGES

TEST(ImageCodecTest, ResizeIsBilinearWithHalfPixelCentres) {
  // Source coordinate s = (d + 0.5) * in / out - 0.5 per axis, clamped; taps floor(s) and
  // floor(s) + 1, weights 1 - f and f. Values worked out by hand:
  // 2 -> 4: s = -0.25 (clamped: 0), 0.25, 0.75, 1.25 (clamped: 1), so taps (0, f 0),
  // (0, f .25), (0, f .75), (1, f 0). Image [0 100; 200 40]:
  // row 0: 0, 25, 75, 100; row 3: 200, 160, 80, 40; row 1 = row 0 + .25 (row 3 - row 0):
  // 50, 58.75, 76.25, 85; row 2 = row 0 + .75 (row 3 - row 0): 150, 126.25, 78.75, 55.
  const DecodedImage small{1, 2, 2, {0, 100, 200, 40}};
  EXPECT_EQ(ResizeImage(small, 4, 4).pixels, (std::vector<uint8_t>{0, 25, 75, 100,    //
                                                                   50, 59, 76, 85,    //
                                                                   150, 126, 79, 55,  //
                                                                   200, 160, 80, 40}));
  // 4 -> 2: s = 0.5, 2.5: each output is the mean of a 2 x 2 block of v = 16 y + 4 x:
  // (0 + 4 + 16 + 20) / 4 = 10, (8 + 12 + 24 + 28) / 4 = 18, 42, 50.
  DecodedImage big{1, 4, 4, {}};
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) big.pixels.push_back(static_cast<uint8_t>(16 * y + 4 * x));
  }
  const DecodedImage down = ResizeImage(big, 2, 2);
  EXPECT_EQ(down.height, 2);
  EXPECT_EQ(down.width, 2);
  EXPECT_EQ(down.pixels, (std::vector<uint8_t>{10, 18, 42, 50}));
  // 3 -> 2 (scale 1.5): s = 0.25, 1.75: [10 50 200] -> 10 + .25 * 40 = 20, 50 + .75 * 150 =
  // 162.5, which rounds up to 163.
  const DecodedImage row{1, 1, 3, {10, 50, 200}};
  EXPECT_EQ(ResizeImage(row, 1, 2).pixels, (std::vector<uint8_t>{20, 163}));
  // Planes are resized independently; one pixel fills the output.
  const DecodedImage two{2, 1, 1, {9, 200}};
  const DecodedImage filled = ResizeImage(two, 2, 3);
  EXPECT_EQ(filled.channels, 2);
  EXPECT_EQ(filled.pixels, (std::vector<uint8_t>{9, 9, 9, 9, 9, 9, 200, 200, 200, 200, 200, 200}));
  // The same size is the identity.
  EXPECT_EQ(ResizeImage(big, 4, 4).pixels, big.pixels);
}

TEST(ImageCodecTest, CropCutsTheSameWindowFromEveryPlane) {
  // Two planes of 3 x 4: plane 0 holds 10 y + x, plane 1 100 + 10 y + x.
  DecodedImage image{2, 3, 4, {}};
  for (int c = 0; c < 2; ++c) {
    for (int y = 0; y < 3; ++y) {
      for (int x = 0; x < 4; ++x)
        image.pixels.push_back(static_cast<uint8_t>(100 * c + 10 * y + x));
    }
  }
  const DecodedImage window = CropImage(image, 1, 2, 2, 2);
  EXPECT_EQ(window.channels, 2);
  EXPECT_EQ(window.height, 2);
  EXPECT_EQ(window.width, 2);
  EXPECT_EQ(window.pixels, (std::vector<uint8_t>{12, 13, 22, 23, 112, 113, 122, 123}));
  EXPECT_EQ(CropImage(image, 0, 0, 3, 4).pixels, image.pixels);
  // Outside the image, empty, or pixels that do not match the shape: errors saying so.
  for (const auto& [top, left, h, w] : std::vector<std::tuple<int, int, int, int>>{
           {2, 0, 2, 2}, {0, 3, 1, 2}, {-1, 0, 1, 1}, {0, 0, 0, 1}}) {
    try {
      CropImage(image, top, left, h, w);
      ADD_FAILURE() << "cropped " << h << " x " << w << " at " << top << ", " << left;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("from an image of 3 x 4"), std::string::npos)
          << e.what();
    }
  }
  const DecodedImage short_pixels{1, 2, 2, {1, 2, 3}};
  EXPECT_THROW(CropImage(short_pixels, 0, 0, 1, 1), Error);
}

TEST(ImageCodecTest, ResizeRefusesBadSizes) {
  const DecodedImage small{1, 2, 2, {0, 100, 200, 40}};
  EXPECT_THROW(ResizeImage(small, 0, 4), Error);
  EXPECT_THROW(ResizeImage(small, 4, -1), Error);
  const DecodedImage empty;
  EXPECT_THROW(ResizeImage(empty, 2, 2), Error);
  const DecodedImage short_pixels{3, 2, 2, {1, 2, 3}};
  try {
    ResizeImage(short_pixels, 2, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace cortado
