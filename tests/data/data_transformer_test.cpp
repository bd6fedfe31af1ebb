// SPDX-License-Identifier: Apache-2.0
#include "data/data_transformer.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "data/data_test_util.hpp"
#include "data/image_test_util.hpp"
#include "io/proto_io.hpp"

namespace cortado {
namespace {

using testing::ByteDatum;

caffe::TransformationParameter Param(const std::string& text) {
  caffe::TransformationParameter param;
  io::ReadProtoFromTextString(text, "<test>", &param);
  return param;
}

// The test datum: 2 channels of 3 x 4, byte j (CHW order) equal to j, so value = index.
caffe::Datum TinyDatum() { return ByteDatum(2, 3, 4, 0, 7); }

std::vector<float> Apply(const DataTransformer& transformer, const caffe::Datum& datum,
                         uint32_t seed = 1701) {
  const auto shape = transformer.InferShape(datum);
  std::vector<float> out(static_cast<size_t>(shape[0]) * shape[1] * shape[2], -1.0f);
  Rng rng(seed);
  transformer.Transform(datum, out.data(), &rng);
  return out;
}

std::vector<float> Iota(int n, float scale = 1.0f, float offset = 0.0f) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = (i - offset) * scale;
  return v;
}

TEST(DataTransformerTest, IdentityKeepsValuesAndShape) {
  DataTransformer t(Param(""), caffe::TRAIN, "test");
  EXPECT_EQ(t.InferShape(TinyDatum()), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(Apply(t, TinyDatum()), Iota(24));
}

TEST(DataTransformerTest, Scale) {
  DataTransformer t(Param("scale: 0.5"), caffe::TEST, "test");
  EXPECT_EQ(Apply(t, TinyDatum()), Iota(24, 0.5f));  // j * 0.5
}

TEST(DataTransformerTest, FloatDataIsScaled) {
  caffe::Datum datum;
  datum.set_channels(1);
  datum.set_height(1);
  datum.set_width(3);
  for (float v : {1.5f, -2.0f, 300.0f}) datum.add_float_data(v);
  DataTransformer t(Param("scale: 2"), caffe::TEST, "test");
  EXPECT_EQ(Apply(t, datum), (std::vector<float>{3.0f, -4.0f, 600.0f}));
}

TEST(DataTransformerTest, OneMeanValueForAllChannels) {
  DataTransformer t(Param("mean_value: 10 scale: 2"), caffe::TEST, "test");
  EXPECT_EQ(Apply(t, TinyDatum()), Iota(24, 2.0f, 10.0f));  // (j - 10) * 2
}

TEST(DataTransformerTest, MeanValuePerChannel) {
  DataTransformer t(Param("mean_value: 1 mean_value: 20"), caffe::TEST, "test");
  std::vector<float> expected = Iota(24);
  for (int j = 0; j < 12; ++j) expected[j] -= 1;    // channel 0: j - 1
  for (int j = 12; j < 24; ++j) expected[j] -= 20;  // channel 1: j - 20
  EXPECT_EQ(Apply(t, TinyDatum()), expected);
}

TEST(DataTransformerTest, WrongNumberOfMeanValuesIsAnError) {
  DataTransformer t(Param("mean_value: 1 mean_value: 2 mean_value: 3"), caffe::TEST,
                    "layer 'd' (Data)");
  try {
    Apply(t, TinyDatum());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("layer 'd'"), std::string::npos) << e.what();
  }
}

// Writes a 1 x 2 x 3 x 4 mean whose value at index j is 0.25 * j.
std::string WriteMean(const testing::TempDir& dir) {
  caffe::BlobProto mean;
  for (int d : {1, 2, 3, 4}) mean.mutable_shape()->add_dim(d);
  for (int j = 0; j < 24; ++j) mean.add_data(0.25f * j);
  const std::string path = dir / "mean.binaryproto";
  io::WriteProtoToBinaryFile(mean, path);
  return path;
}

TEST(DataTransformerTest, MeanFile) {
  testing::TempDir dir;
  DataTransformer t(Param("mean_file: '" + WriteMean(dir) + "'"), caffe::TEST, "test");
  EXPECT_EQ(Apply(t, TinyDatum()), Iota(24, 0.75f));  // j - 0.25 j
}

TEST(DataTransformerTest, MeanFileIsIndexedAtTheSourcePositionWhenCropping) {
  testing::TempDir dir;
  DataTransformer t(Param("mean_file: '" + WriteMean(dir) + "' crop_size: 2 scale: 2"), caffe::TEST,
                    "test");
  // Center crop of 3 x 4 to 2 x 2: h_off = (3-2)/2 = 0, w_off = (4-2)/2 = 1, so the source
  // indices are c0: 1 2 / 5 6, c1: 13 14 / 17 18; each gives (j - 0.25 j) * 2 = 1.5 j.
  // (Indexing the mean at the output position would give different numbers.)
  EXPECT_EQ(Apply(t, TinyDatum()),
            (std::vector<float>{1.5f, 3.0f, 7.5f, 9.0f, 19.5f, 21.0f, 25.5f, 27.0f}));
}

TEST(DataTransformerTest, MeanFileWithMeanValueIsAnError) {
  testing::TempDir dir;
  EXPECT_THROW(DataTransformer(Param("mean_file: '" + WriteMean(dir) + "' mean_value: 3"),
                               caffe::TEST, "test"),
               Error);
}

TEST(DataTransformerTest, MeanFileOfTheWrongShapeIsAnError) {
  testing::TempDir dir;
  DataTransformer t(Param("mean_file: '" + WriteMean(dir) + "'"), caffe::TEST, "test");
  EXPECT_THROW(t.InferShape(ByteDatum(1, 3, 4, 0, 0)), Error);
}

TEST(DataTransformerTest, MissingMeanFileIsNotFound) {
  try {
    DataTransformer t(Param("mean_file: '/nonexistent/mean.binaryproto'"), caffe::TEST, "test");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

TEST(DataTransformerTest, CenterCropInTest) {
  DataTransformer t(Param("crop_size: 2 mirror: true"), caffe::TEST, "test");
  EXPECT_EQ(t.InferShape(TinyDatum()), (std::vector<int>{2, 2, 2}));
  // h_off 0, w_off 1 (see above); mirror does nothing in TEST.
  for (uint32_t seed : {1u, 2u, 3u, 1701u}) {
    EXPECT_EQ(Apply(t, TinyDatum(), seed), (std::vector<float>{1, 2, 5, 6, 13, 14, 17, 18}));
  }
}

TEST(DataTransformerTest, RandomMirrorAndCropInTrainFollowTheSeed) {
  DataTransformer t(Param("crop_size: 2 mirror: true"), caffe::TRAIN, "test");
  // std::mt19937(1) draws 1791095845, 4282876139, 3093770124: mirror = 1 (odd),
  // h_off = 4282876139 % 2 = 1, w_off = 3093770124 % 3 = 0. Rows 1-2, columns 0-1, flipped:
  // c0: [5 4] [9 8], c1: [17 16] [21 20].
  EXPECT_EQ(Apply(t, TinyDatum(), 1), (std::vector<float>{5, 4, 9, 8, 17, 16, 21, 20}));
  // std::mt19937(2) draws 1872583848, 794921487, 111352301: no mirror, h_off 1, w_off 2.
  EXPECT_EQ(Apply(t, TinyDatum(), 2), (std::vector<float>{6, 7, 10, 11, 18, 19, 22, 23}));
  // The same seed gives the same result.
  EXPECT_EQ(Apply(t, TinyDatum(), 2), Apply(t, TinyDatum(), 2));
  // Over many seeds every offset (2 x 3) and both flips occur.
  std::set<std::vector<float>> outcomes;
  for (uint32_t seed = 0; seed < 200; ++seed) outcomes.insert(Apply(t, TinyDatum(), seed));
  EXPECT_EQ(outcomes.size(), 12u);
}

TEST(DataTransformerTest, CropLargerThanDatumIsAnError) {
  DataTransformer t(Param("crop_size: 4"), caffe::TEST, "test");
  EXPECT_THROW(t.InferShape(TinyDatum()), Error);
}

TEST(DataTransformerTest, EncodedDatumThatIsNoImageNamesTheLayer) {
  DataTransformer t(Param(""), caffe::TEST, "layer 'images' (Data)");
  caffe::Datum datum = TinyDatum();
  datum.set_encoded(true);
  try {
    Apply(t, datum);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("layer 'images' (Data): encoded datum: not a JPEG or PNG image", 0), 0u)
        << msg;
  }
}

TEST(DataTransformerTest, ForceColorWithForceGrayIsAnError) {
  try {
    DataTransformer t(Param("force_color: true force_gray: true"), caffe::TEST, "test");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(DecodeColorMode(Param("")), ColorMode::kKeep);
  EXPECT_EQ(DecodeColorMode(Param("force_color: true")), ColorMode::kColor);
  EXPECT_EQ(DecodeColorMode(Param("force_gray: true")), ColorMode::kGray);
}

#if CORTADO_WITH_IMAGES

TEST(DataTransformerTest, EncodedDatumIsDecodedThenTransformed) {
  // A 3 x 4 color PNG, and the raw datum of its pixels (planar B, G, R).
  const testing::Pixels p = testing::Ramp(4, 3);
  const std::vector<uint8_t> file = testing::EncodePng(p);
  caffe::Datum encoded;
  encoded.set_encoded(true);
  encoded.set_data(std::string(file.begin(), file.end()));
  caffe::Datum raw;
  raw.set_channels(3);
  raw.set_height(3);
  raw.set_width(4);
  const std::vector<uint8_t> planar = testing::PlanarBgr(p);
  raw.set_data(std::string(planar.begin(), planar.end()));
  for (caffe::Phase phase : {caffe::TRAIN, caffe::TEST}) {
    DataTransformer t(Param("crop_size: 2 mirror: true scale: 0.25 mean_value: 1 mean_value: 2 "
                            "mean_value: 3"),
                      phase, "test");
    EXPECT_EQ(t.InferShape(encoded), (std::vector<int>{3, 2, 2}));
    for (uint32_t seed = 0; seed < 8; ++seed)
      EXPECT_EQ(Apply(t, encoded, seed), Apply(t, raw, seed));
  }
  // force_gray: one channel, Y = 0.299 R + 0.587 G + 0.114 B rounded.
  DataTransformer gray(Param("force_gray: true"), caffe::TEST, "test");
  EXPECT_EQ(gray.InferShape(encoded), (std::vector<int>{1, 3, 4}));
  std::vector<float> luma;
  for (size_t i = 0; i < p.data.size(); i += 3) {
    luma.push_back(static_cast<float>(
        (299 * p.data[i] + 587 * p.data[i + 1] + 114 * p.data[i + 2] + 500) / 1000));
  }
  EXPECT_EQ(Apply(gray, encoded), luma);
  // A corrupt image names the owner.
  encoded.set_data(std::string(file.begin(), file.begin() + 20));
  try {
    Apply(gray, encoded);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    EXPECT_EQ(std::string(e.what()).rfind("test: encoded datum: corrupt PNG data: ", 0), 0u)
        << e.what();
  }
}

#else

CORTADO_SKIP_WITHOUT_IMAGES(DataTransformerTest, EncodedDatumIsDecodedThenTransformed)

#endif  // CORTADO_WITH_IMAGES

TEST(DataTransformerTest, DataOfTheWrongSizeIsAnError) {
  caffe::Datum datum = TinyDatum();
  datum.set_data(std::string(5, '\1'));
  DataTransformer t(Param(""), caffe::TEST, "test");
  std::vector<float> out(24);
  Rng rng(1);
  EXPECT_THROW(t.Transform(datum, out.data(), &rng), Error);
}

}  // namespace
}  // namespace cortado
