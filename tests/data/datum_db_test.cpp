// SPDX-License-Identifier: Apache-2.0
#include "data/datum_db.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "data/data_test_util.hpp"
#include "data/image_test_util.hpp"
#include "data/lmdb_db.hpp"

namespace cortado {
namespace {

using testing::ByteDatum;
using testing::Key;
using testing::TempDir;

// `n` records of shape 1 x 2 x 3 under keys Key(i); record i has bytes i * 40 + j (mod 256,
// so values above 127 show that bytes are read unsigned) and label 100 + i. Written in reverse
// key order: LMDB sorts by key.
std::string WriteDb(const TempDir& dir, int n) {
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = n - 1; i >= 0; --i) {
    records.emplace_back(Key(i), ByteDatum(1, 2, 3, i * 40, 100 + i).SerializeAsString());
  }
  const std::string path = dir / "db";
  testing::WriteLmdb(path, records);
  return path;
}

std::vector<float> ExpectedValues(int first_record, int n) {
  std::vector<float> values;
  for (int i = first_record; i < first_record + n; ++i) {
    for (int j = 0; j < 6; ++j) values.push_back(static_cast<float>((i * 40 + j) & 0xff));
  }
  return values;
}

struct Range {
  std::vector<float> data;
  std::vector<int32_t> labels;
  std::vector<std::string> keys;
};

Range ReadRange(DatumDbReader* reader, int64_t start, int64_t n) {
  Range r;
  r.data.assign(static_cast<size_t>(n * reader->sample_size()), -1.0f);
  r.labels.assign(static_cast<size_t>(n), -1);
  reader->Read(start, n, r.data.data(), r.labels.data(), &r.keys);
  return r;
}

TEST(DatumDbReaderTest, CountShapeAndRangesInKeyOrder) {
  TempDir dir;
  const std::string path = WriteDb(dir, 10);
  DatumDbReader reader(path, "test");
  EXPECT_EQ(reader.size(), 10);
  EXPECT_EQ(reader.shape(), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(reader.sample_size(), 6);
  EXPECT_EQ(reader.path(), path);

  // Forward ranges, one continuing the last, then one going back, then the whole database.
  const std::pair<int, int> ranges[] = {{0, 3}, {3, 4}, {8, 2}, {1, 2}, {0, 10}, {9, 1}};
  for (const auto& [start, n] : ranges) {
    SCOPED_TRACE(::testing::Message() << "records [" << start << ", " << start + n << ")");
    const Range r = ReadRange(&reader, start, n);
    EXPECT_EQ(r.data, ExpectedValues(start, n));
    std::vector<int32_t> labels;
    std::vector<std::string> keys;
    for (int i = start; i < start + n; ++i) {
      labels.push_back(100 + i);
      keys.push_back(Key(i));
    }
    EXPECT_EQ(r.labels, labels);
    EXPECT_EQ(r.keys, keys);
  }
  // An empty range reads nothing; keys are optional.
  EXPECT_TRUE(ReadRange(&reader, 10, 0).keys.empty());
  std::vector<float> data(6);
  int32_t label = 0;
  reader.Read(4, 1, data.data(), &label, nullptr);
  EXPECT_EQ(data, ExpectedValues(4, 1));
  EXPECT_EQ(label, 104);
}

TEST(DatumDbReaderTest, FloatDataIsReadAsStored) {
  TempDir dir;
  const std::string path = dir / "floats";
  LmdbWriter writer(path, "test");
  for (int i = 0; i < 3; ++i) {
    caffe::Datum datum;
    datum.set_channels(2);
    datum.set_height(1);
    datum.set_width(2);
    for (int j = 0; j < 4; ++j) datum.add_float_data(-1.5f + i + 0.25f * j);
    datum.set_label(-i);
    writer.Put(Key(i), datum.SerializeAsString());
  }
  writer.Commit();
  DatumDbReader reader(path, "test");
  EXPECT_EQ(reader.shape(), (std::vector<int>{2, 1, 2}));
  const Range r = ReadRange(&reader, 1, 2);
  EXPECT_EQ(r.data, (std::vector<float>{-0.5f, -0.25f, 0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f}));
  EXPECT_EQ(r.labels, (std::vector<int32_t>{-1, -2}));
  EXPECT_EQ(r.keys, (std::vector<std::string>{Key(1), Key(2)}));
}

TEST(DatumDbReaderTest, RangeOutsideTheDatabaseIsAnError) {
  TempDir dir;
  const std::string path = WriteDb(dir, 4);
  DatumDbReader reader(path, "reader");
  std::vector<float> data(100);
  std::vector<int32_t> labels(10);
  for (const auto& [start, n] : std::vector<std::pair<int64_t, int64_t>>{
           {3, 2}, {-1, 1}, {0, -1}, {5, 0}, {1, int64_t{1} << 62}}) {
    try {
      reader.Read(start, n, data.data(), labels.data(), nullptr);
      FAIL() << "no error for [" << start << ", +" << n << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("reader: records ["), std::string::npos) << msg;
      EXPECT_NE(msg.find(path + "' of 4 records"), std::string::npos) << msg;
    }
  }
}

TEST(DatumDbReaderTest, RecordOfAnotherShapeNamesTheKeyAndBothShapes) {
  TempDir dir;
  const std::string path = dir / "db";
  testing::WriteLmdb(path, {{Key(0), ByteDatum(1, 2, 3, 0, 0).SerializeAsString()},
                            {Key(1), ByteDatum(1, 2, 3, 0, 1).SerializeAsString()},
                            {Key(2), ByteDatum(3, 2, 1, 0, 2).SerializeAsString()}});
  DatumDbReader reader(path, "source 'x'");
  EXPECT_EQ(ReadRange(&reader, 0, 2).labels, (std::vector<int32_t>{0, 1}));
  try {
    ReadRange(&reader, 1, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_EQ(std::string(e.what()), "source 'x': record '00000002' of LMDB database '" + path +
                                         "' is 3 x 2 x 1, but the first record is 1 x 2 x 3");
  }
}

TEST(DatumDbReaderTest, CorruptEncodedDatumsNameThePathAndTheKey) {
  TempDir dir;
  caffe::Datum encoded = ByteDatum(3, 1, 1, 0, 7);
  encoded.set_data("\xff\xd8\xff\xe0 not really a JPEG");
  encoded.set_encoded(true);
  const std::string raw = ByteDatum(3, 1, 1, 0, 7).SerializeAsString();

  // In a later record: Read fails.
  const std::string later = dir / "later";
  testing::WriteLmdb(later, {{Key(0), raw}, {"img_1.jpg", encoded.SerializeAsString()}});
  DatumDbReader reader(later, "test");
  try {
    ReadRange(&reader, 0, 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ImageCodecsAvailable() ? ErrorCode::kParse : ErrorCode::kUnimplemented);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("record 'img_1.jpg' of LMDB database '" + later + "'"), std::string::npos)
        << msg;
    if (ImageCodecsAvailable()) {
      EXPECT_NE(msg.find("corrupt JPEG data"), std::string::npos) << msg;
    }
  }

  // In the first record: opening fails.
  const std::string first = dir / "first";
  testing::WriteLmdb(first, {{"img_0.jpg", encoded.SerializeAsString()}});
  try {
    DatumDbReader opened(first, "test");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ImageCodecsAvailable() ? ErrorCode::kParse : ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("record 'img_0.jpg' of LMDB database '" + first + "'"),
              std::string::npos)
        << e.what();
  }
}

#if CORTADO_WITH_IMAGES

TEST(DatumDbReaderTest, EncodedDatumsAreDecoded) {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> records;
  std::vector<float> expected;
  for (int i = 0; i < 3; ++i) {
    const testing::Pixels p = testing::Ramp(3, 2, 50 * i);
    const std::vector<uint8_t> file = testing::EncodePng(p);
    caffe::Datum datum;
    datum.set_encoded(true);
    datum.set_data(std::string(file.begin(), file.end()));
    datum.set_label(10 + i);
    records.emplace_back(Key(i), datum.SerializeAsString());
    for (uint8_t v : testing::PlanarBgr(p)) expected.push_back(v);
  }
  const std::string path = dir / "db";
  testing::WriteLmdb(path, records);
  DatumDbReader reader(path, "test");
  EXPECT_EQ(reader.shape(), (std::vector<int>{3, 2, 3}));
  const Range r = ReadRange(&reader, 0, 3);
  EXPECT_EQ(r.data, expected);
  EXPECT_EQ(r.labels, (std::vector<int32_t>{10, 11, 12}));
}

#else

CORTADO_SKIP_WITHOUT_IMAGES(DatumDbReaderTest, EncodedDatumsAreDecoded)

#endif  // CORTADO_WITH_IMAGES

TEST(DatumDbReaderTest, CorruptRecordAndWrongValueCountNameTheKey) {
  TempDir dir;
  caffe::Datum short_datum = ByteDatum(1, 2, 3, 0, 1);
  short_datum.set_data("abc");
  const std::string path = dir / "db";
  testing::WriteLmdb(path, {{Key(0), ByteDatum(1, 2, 3, 0, 0).SerializeAsString()},
                            {Key(1), short_datum.SerializeAsString()},
                            {Key(2), "\xff\xff\xff\xff"}});
  DatumDbReader reader(path, "test");
  try {
    ReadRange(&reader, 1, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("record '00000001'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("holds 3 values for shape 1 x 2 x 3"), std::string::npos)
        << e.what();
  }
  try {
    ReadRange(&reader, 2, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("record '00000002'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is not a valid Datum"), std::string::npos) << e.what();
  }
}

// LMDB allows one environment per database per process; readers of one database share it. Many
// threads opening, reading and closing readers of one database at once all see every record (a
// second environment of the same files in the process used to reset the lock table under the
// first one's readers, which then saw the empty database of before the first write).
TEST(LmdbReaderTest, ConcurrentReadersInOneProcessSeeEveryRecord) {
  TempDir dir;
  const std::string path = WriteDb(dir, 12);
  LmdbReader held(path, "held");  // open across the whole test
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 40; ++round) {
        try {
          LmdbReader reader(path, "reader " + std::to_string(t));
          std::string key;
          reader.SeekTo(round % 12);
          reader.Next(&key);
          if (reader.size() != 12 || key != Key(round % 12)) ++failures;
        } catch (const Error&) {
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  std::string key;
  held.SeekTo(11);
  held.Next(&key);
  EXPECT_EQ(key, Key(11)) << "the first reader still reads after the others closed";
  EXPECT_EQ(held.size(), 12);
}

TEST(DatumDbReaderTest, MissingPathIsNotFoundAndNamesIt) {
  try {
    DatumDbReader reader("/nonexistent/mnist_train_lmdb", "layer 'data'");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'data'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/nonexistent/mnist_train_lmdb"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace cortado
