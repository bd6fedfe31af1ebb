// SPDX-License-Identifier: Apache-2.0
#include "data/data_layer.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "data/data_test_util.hpp"
#include "data/image_test_util.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::ByteDatum;
using testing::Key;
using testing::TempDir;

// Writes `n` records of shape c x h x w; record i has bytes i*10 + j and label i.
std::string WriteDb(const TempDir& dir, int n, int c = 1, int h = 2, int w = 3,
                    int corrupt_record = -1) {
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = 0; i < n; ++i) {
    std::string value = ByteDatum(c, h, w, i * 10, i).SerializeAsString();
    if (i == corrupt_record) value = "\xff\xff\xff\xff";  // a truncated varint: not a Datum
    records.emplace_back(Key(i), value);
  }
  const std::string path = dir / "db";
  testing::WriteLmdb(path, records);
  return path;
}

std::unique_ptr<Layer> MakeLayer(Context* ctx, const std::string& source, int batch_size,
                                 const std::string& extra = "",
                                 const std::string& tops = "top: 'data' top: 'label'") {
  return CreateLayer(
      testing::LayerParam("name: 'mnist' type: 'Data' " + tops + " data_param { source: '" +
                          source + "' backend: LMDB batch_size: " + std::to_string(batch_size) +
                          " } " + extra),
      ctx);
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.cpu_data(), t.cpu_data() + t.count());
}

TEST(DataLayerTest, ShapesValuesLabelsAndWrapAround) {
  TempDir dir;
  const std::string db = WriteDb(dir, 5);
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, db, 2);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{2, 1, 2, 3}));
  EXPECT_EQ(label.shape(), (std::vector<int>{2}));
  // Batches of records (0 1), (2 3), (4 0) wrapping around, then (1 2).
  const int expected_records[4][2] = {{0, 1}, {2, 3}, {4, 0}, {1, 2}};
  for (const auto& records : expected_records) {
    layer->Forward({}, {&data, &label});
    EXPECT_EQ(data.shape(), (std::vector<int>{2, 1, 2, 3}));
    std::vector<float> expected_data, expected_labels;
    for (int r : records) {
      for (int j = 0; j < 6; ++j) expected_data.push_back(static_cast<float>(r * 10 + j));
      expected_labels.push_back(static_cast<float>(r));
    }
    EXPECT_EQ(Values(data), expected_data);
    EXPECT_EQ(Values(label), expected_labels);
  }
}

TEST(DataLayerTest, DataOnlyTopAndTransform) {
  TempDir dir;
  const std::string db = WriteDb(dir, 3, 1, 3, 4);
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, db, 1,
                         "transform_param { crop_size: 2 scale: 0.5 mean_value: 2 } "
                         "phase: TEST",
                         "top: 'data'");
  Tensor data;
  layer->Initialize({}, {&data});
  EXPECT_EQ(data.shape(), (std::vector<int>{1, 1, 2, 2}));
  layer->Forward({}, {&data});
  // Record 0 holds 0..11 as 3 x 4; the center crop takes 1 2 / 5 6; (v - 2) * 0.5.
  EXPECT_EQ(Values(data), (std::vector<float>{-0.5f, 0.0f, 1.5f, 2.0f}));
}

TEST(DataLayerTest, RandSkipStartsAtASeededRecordAndContinuesInOrder) {
  TempDir dir;
  const std::string db = WriteDb(dir, 5);
  bool some_skip = false;
  for (int seed = 1; seed <= 10; ++seed) {
    Context ctx(Device::Cpu(), seed);
    auto skipping = CreateLayer(
        testing::LayerParam("name: 'mnist' type: 'Data' top: 'data' top: 'label' data_param { "
                            "source: '" +
                            db + "' backend: LMDB batch_size: 3 rand_skip: 4 }"),
        &ctx);
    Tensor data, label;
    skipping->Initialize({}, {&data, &label});
    const int64_t skip = static_cast<DataLayer*>(skipping.get())->skip();
    EXPECT_GE(skip, 0);
    EXPECT_LT(skip, 4);
    some_skip = some_skip || skip > 0;
    skipping->Forward({}, {&data, &label});
    EXPECT_EQ(Values(label),
              (std::vector<float>{static_cast<float>(skip % 5), static_cast<float>((skip + 1) % 5),
                                  static_cast<float>((skip + 2) % 5)}));
    skipping->Forward({}, {&data, &label});
    EXPECT_EQ(label.cpu_data()[0], static_cast<float>((skip + 3) % 5));
  }
  EXPECT_TRUE(some_skip) << "rand_skip never skipped over 10 seeds";
}

TEST(DataLayerTest, MissingDatabaseNamesLayerAndPath) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, "/nonexistent/mnist_lmdb", 2);
  Tensor data, label;
  try {
    layer->Initialize({}, {&data, &label});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mnist"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/nonexistent/mnist_lmdb"), std::string::npos) << msg;
  }
}

TEST(DataLayerTest, NotADatabaseIsAnIoError) {
  TempDir dir;
  const std::string path = dir / "junk";
  std::filesystem::create_directories(path);
  std::ofstream(path + "/data.mdb") << std::string(8192, 'x');
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, path, 2);
  Tensor data, label;
  try {
    layer->Initialize({}, {&data, &label});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(DataLayerTest, CorruptRecordErrorReachesForwardFromThePrefetchThread) {
  TempDir dir;
  const std::string db = WriteDb(dir, 6, 1, 2, 3, /*corrupt_record=*/3);
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, db, 2);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  layer->Forward({}, {&data, &label});  // records 0, 1
  EXPECT_EQ(Values(label), (std::vector<float>{0, 1}));
  for (int attempt = 0; attempt < 2; ++attempt) {  // records 2, 3: fails, and keeps failing
    try {
      layer->Forward({}, {&data, &label});
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kIo);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("layer 'mnist'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(db), std::string::npos) << msg;
      EXPECT_NE(msg.find("00000003"), std::string::npos) << msg;
    }
  }
  // Seek clears the error; batch 0 reads again.
  static_cast<DataLayer*>(layer.get())->Seek(0);
  layer->Forward({}, {&data, &label});
  EXPECT_EQ(Values(label), (std::vector<float>{0, 1}));
}

TEST(DataLayerTest, CorruptFirstRecordFailsSetup) {
  TempDir dir;
  const std::string db = WriteDb(dir, 2, 1, 2, 3, /*corrupt_record=*/0);
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, db, 2);
  Tensor data, label;
  EXPECT_THROW(layer->Initialize({}, {&data, &label}), Error);
}

TEST(DataLayerTest, RecordOfAnotherShapeIsAnError) {
  TempDir dir;
  const std::string db = dir / "db";
  testing::WriteLmdb(db, {{Key(0), ByteDatum(1, 2, 3, 0, 0).SerializeAsString()},
                          {Key(1), ByteDatum(1, 3, 3, 0, 1).SerializeAsString()}});
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, db, 2);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  EXPECT_THROW(layer->Forward({}, {&data, &label}), Error);
}

TEST(DataLayerTest, EncodedRecordThatIsNoImageNamesTheKey) {
  TempDir dir;
  const std::string db = dir / "db";
  caffe::Datum encoded = ByteDatum(3, 1, 1, 0, 0);
  encoded.set_encoded(true);
  testing::WriteLmdb(db, {{"cat.jpg", encoded.SerializeAsString()}});
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, db, 2);
  Tensor data, label;
  try {
    layer->Initialize({}, {&data, &label});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("not a JPEG or PNG image"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer 'mnist'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("record 'cat.jpg' of LMDB database '" + db + "'"), std::string::npos) << msg;
  }
}

#if CORTADO_WITH_IMAGES

// A raw datum of `p`'s pixels in Caffe's layout (planar B, G, R), and the same image as an
// encoded datum holding `file`.
std::string RawRecord(const testing::Pixels& p, int label) {
  caffe::Datum datum;
  datum.set_channels(p.channels >= 3 ? 3 : 1);
  datum.set_height(p.height);
  datum.set_width(p.width);
  const std::vector<uint8_t> planar = testing::PlanarBgr(p);
  datum.set_data(std::string(planar.begin(), planar.end()));
  datum.set_label(label);
  return datum.SerializeAsString();
}

std::string EncodedRecord(const std::vector<uint8_t>& file, int label) {
  caffe::Datum datum;
  datum.set_encoded(true);
  datum.set_data(std::string(file.begin(), file.end()));
  datum.set_label(label);
  return datum.SerializeAsString();
}

// Batches `n` Forwards of a Data layer over `db`, data values then labels.
std::vector<float> Batches(const std::string& db, int batch_size, int n, const std::string& extra) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, db, batch_size, extra);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  std::vector<float> values;
  for (int i = 0; i < n; ++i) {
    layer->Forward({}, {&data, &label});
    const std::vector<float> d = Values(data), l = Values(label);
    values.insert(values.end(), d.begin(), d.end());
    values.insert(values.end(), l.begin(), l.end());
  }
  return values;
}

TEST(DataLayerTest, PngEncodedRecordsGiveTheBatchesOfTheSameRawRecords) {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> raw, png;
  for (int i = 0; i < 5; ++i) {
    const testing::Pixels p = testing::Ramp(5, 4, 37 * i);
    raw.emplace_back(Key(i), RawRecord(p, i));
    png.emplace_back(Key(i), EncodedRecord(testing::EncodePng(p), i));
  }
  testing::WriteLmdb(dir / "raw", raw);
  testing::WriteLmdb(dir / "png", png);
  // Random crops and mirrors (TRAIN), per-channel means and a scale: the same draws for both.
  const std::string transform =
      "transform_param { crop_size: 3 mirror: true scale: 0.5 mean_value: 10 mean_value: 20 "
      "mean_value: 30 }";
  const std::vector<float> expected = Batches(dir / "raw", 2, 4, transform);
  EXPECT_EQ(expected.size(), 4u * (2 * 3 * 3 * 3 + 2));
  EXPECT_EQ(Batches(dir / "png", 2, 4, transform), expected);
}

TEST(DataLayerTest, ForceColorAndForceGrayChooseTheChannels) {
  TempDir dir;
  const testing::Pixels gray{3, 2, 1, {0, 50, 100, 150, 200, 250}};
  const testing::Pixels color{2, 1, 3, {255, 0, 0, 0, 255, 0}};
  testing::WriteLmdb(dir / "gray", {{Key(0), EncodedRecord(testing::EncodePng(gray), 4)}});
  testing::WriteLmdb(dir / "color", {{Key(0), EncodedRecord(testing::EncodePng(color), 5)}});
  Context ctx(Device::Cpu(), 1701);
  Tensor data, label;
  auto colored = MakeLayer(&ctx, dir / "gray", 1, "transform_param { force_color: true }");
  colored->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{1, 3, 2, 3}));
  colored->Forward({}, {&data, &label});
  EXPECT_EQ(Values(data), (std::vector<float>{0, 50, 100, 150, 200, 250, 0, 50, 100, 150, 200, 250,
                                              0, 50, 100, 150, 200, 250}));
  auto grayed = MakeLayer(&ctx, dir / "color", 1, "transform_param { force_gray: true }");
  grayed->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{1, 1, 1, 2}));
  grayed->Forward({}, {&data, &label});
  // Red 0.299 * 255 = 76.245 -> 76, green 0.587 * 255 = 149.685 -> 150.
  EXPECT_EQ(Values(data), (std::vector<float>{76, 150}));
  EXPECT_EQ(Values(label), (std::vector<float>{5}));
  // As stored: gray stays one channel.
  auto kept = MakeLayer(&ctx, dir / "gray", 1);
  kept->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{1, 1, 2, 3}));
  // Both at once is an error, as in Caffe.
  auto both =
      MakeLayer(&ctx, dir / "gray", 1, "transform_param { force_color: true force_gray: true }");
  try {
    both->Initialize({}, {&data, &label});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("force_color and force_gray"), std::string::npos)
        << e.what();
  }
}

TEST(DataLayerTest, JpegEncodedRecordsDecodeNearTheirPixels) {
  TempDir dir;
  const testing::Pixels p = testing::Flat(8, 8, 220, 120, 30);
  testing::WriteLmdb(dir / "db", {{Key(0), EncodedRecord(testing::EncodeJpeg(p), 3)}});
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, dir / "db", 1);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{1, 3, 8, 8}));
  layer->Forward({}, {&data, &label});
  const std::vector<float> values = Values(data);
  const float bgr[3] = {30, 120, 220};
  for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(values[i], bgr[i / 64], 3) << i;
}

TEST(DataLayerTest, CorruptEncodedRecordFailsItsBatchNamingTheKeyAndTheDatabase) {
  TempDir dir;
  const std::string db = dir / "db";
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = 0; i < 3; ++i) {
    records.emplace_back(Key(i), EncodedRecord(testing::EncodePng(testing::Ramp(4, 4, i)), i));
  }
  std::vector<uint8_t> truncated = testing::EncodePng(testing::Ramp(4, 4, 3));
  truncated.resize(truncated.size() / 2);
  records.emplace_back("zz_truncated.png", EncodedRecord(truncated, 3));
  testing::WriteLmdb(db, records);
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, db, 2);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  layer->Forward({}, {&data, &label});  // records 0 and 1
  EXPECT_EQ(Values(label), (std::vector<float>{0, 1}));
  try {
    layer->Forward({}, {&data, &label});  // records 2 and 3: decoded in the prefetch thread
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("layer 'mnist' (Data): record 'zz_truncated.png' of LMDB database '" + db +
                            "': corrupt PNG data: ",
                        0),
              0u)
        << msg;
  }
}

#else

CORTADO_SKIP_WITHOUT_IMAGES(DataLayerTest, PngEncodedRecordsGiveTheBatchesOfTheSameRawRecords)
CORTADO_SKIP_WITHOUT_IMAGES(DataLayerTest, ForceColorAndForceGrayChooseTheChannels)
CORTADO_SKIP_WITHOUT_IMAGES(DataLayerTest, JpegEncodedRecordsDecodeNearTheirPixels)
CORTADO_SKIP_WITHOUT_IMAGES(DataLayerTest,
                            CorruptEncodedRecordFailsItsBatchNamingTheKeyAndTheDatabase)

#endif  // CORTADO_WITH_IMAGES

TEST(DataLayerTest, LevelDbIsUnimplemented) {
  TempDir dir;
  const std::string db = WriteDb(dir, 2);
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(testing::LayerParam("name: 'd' type: 'Data' top: 'data' "
                                               "data_param { source: '" +
                                               db + "' batch_size: 2 }"),
                           &ctx);
  Tensor data;
  try {
    layer->Initialize({}, {&data});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("LMDB"), std::string::npos) << e.what();
  }
}

TEST(DataLayerTest, ZeroBatchSizeIsAnError) {
  TempDir dir;
  const std::string db = WriteDb(dir, 2);
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, db, 0);
  Tensor data;
  EXPECT_THROW(layer->Initialize({}, {&data}), Error);
}

// Reads `count` batches and returns data and labels as raw bytes, batch after batch.
std::vector<std::string> ReadBatches(Layer* layer, Tensor* data, Tensor* label, int count) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    layer->Forward({}, {data, label});
    std::string bytes(reinterpret_cast<const char*>(data->cpu_data()),
                      data->count() * sizeof(float));
    bytes.append(reinterpret_cast<const char*>(label->cpu_data()), label->count() * sizeof(float));
    out.push_back(bytes);
  }
  return out;
}

TEST(DataLayerTest, SeekReproducesAnUninterruptedRunWithMirrorAndCrop) {
  TempDir dir;
  const std::string db = WriteDb(dir, 7, 2, 4, 5);
  const std::string transform =
      "transform_param { mirror: true crop_size: 3 scale: 0.5 } phase: TRAIN";
  Context ctx_a(Device::Cpu(), 1701);
  auto a = MakeLayer(&ctx_a, db, 3, transform);
  Tensor data_a, label_a;
  a->Initialize({}, {&data_a, &label_a});
  const auto straight = ReadBatches(a.get(), &data_a, &label_a, 6);

  Context ctx_b(Device::Cpu(), 1701);
  auto b = MakeLayer(&ctx_b, db, 3, transform);
  Tensor data_b, label_b;
  b->Initialize({}, {&data_b, &label_b});
  static_cast<DataLayer*>(b.get())->Seek(3);
  EXPECT_EQ(static_cast<DataLayer*>(b.get())->next_batch_index(), 3);
  const auto resumed = ReadBatches(b.get(), &data_b, &label_b, 3);
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(resumed[k] == straight[3 + k]) << "batch " << 3 + k;

  // Seeking backwards restarts the cursor.
  static_cast<DataLayer*>(a.get())->Seek(1);
  EXPECT_TRUE(ReadBatches(a.get(), &data_a, &label_a, 1)[0] == straight[1]);

  // Batches 0 and 7 hold the same records (0 1 2; 21 records = 3 passes); their random crops
  // and flips come from different seeds, so the test above is not trivially satisfied.
  static_cast<DataLayer*>(a.get())->Seek(0);
  const auto again = ReadBatches(a.get(), &data_a, &label_a, 8);
  EXPECT_TRUE(again[0] == straight[0]);
  EXPECT_FALSE(again[7] == again[0]);
}

TEST(DataLayerTest, DifferentSeedsGiveDifferentTransforms) {
  TempDir dir;
  const std::string db = WriteDb(dir, 4, 1, 6, 6);
  const std::string transform = "transform_param { mirror: true crop_size: 2 } phase: TRAIN";
  Context ctx_a(Device::Cpu(), 1), ctx_b(Device::Cpu(), 2);
  auto a = MakeLayer(&ctx_a, db, 4, transform);
  auto b = MakeLayer(&ctx_b, db, 4, transform);
  Tensor da, la, db_, lb;
  a->Initialize({}, {&da, &la});
  b->Initialize({}, {&db_, &lb});
  EXPECT_NE(ReadBatches(a.get(), &da, &la, 2), ReadBatches(b.get(), &db_, &lb, 2));
}

TEST(DataLayerTest, DestroyedWithAFullQueueStopsCleanly) {
  TempDir dir;
  const std::string db = WriteDb(dir, 3);
  for (int i = 0; i < 5; ++i) {
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakeLayer(&ctx, db, 2);
    Tensor data, label;
    layer->Initialize({}, {&data, &label});
    for (int f = 0; f < i; ++f) layer->Forward({}, {&data, &label});
    if (i > 0) {
      EXPECT_EQ(label.cpu_data()[0], static_cast<float>((2 * (i - 1)) % 3));
    }
  }  // each destructor wakes and joins its prefetch thread, whether its queue is full or not
}

}  // namespace
}  // namespace cortado
