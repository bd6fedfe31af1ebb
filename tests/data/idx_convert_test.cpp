// SPDX-License-Identifier: Apache-2.0
#include "data/idx_convert.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/data_test_util.hpp"
#include "tools/cli_runner.hpp"

namespace cortado {
namespace {

using testing::TempDir;

void PutBigEndian(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out->push_back(static_cast<char>((v >> shift) & 0xff));
}

// IDX images: `count` images of rows x cols, pixel j of image i = 16 i + j.
std::string ImagesBytes(uint32_t count, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::string bytes;
  PutBigEndian(&bytes, magic);
  PutBigEndian(&bytes, count);
  PutBigEndian(&bytes, rows);
  PutBigEndian(&bytes, cols);
  for (uint32_t i = 0; i < count; ++i) {
    for (uint32_t j = 0; j < rows * cols; ++j) bytes.push_back(static_cast<char>(16 * i + j));
  }
  return bytes;
}

// IDX labels: label i = (i * 3) % 10.
std::string LabelsBytes(uint32_t count, uint32_t magic = 0x801) {
  std::string bytes;
  PutBigEndian(&bytes, magic);
  PutBigEndian(&bytes, count);
  for (uint32_t i = 0; i < count; ++i) bytes.push_back(static_cast<char>((i * 3) % 10));
  return bytes;
}

std::string Write(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string WriteGz(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir / name;
  gzFile file = gzopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr);
  EXPECT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(file);
  return path;
}

std::vector<caffe::Datum> ReadDatums(const std::string& db, std::vector<std::string>* keys) {
  std::vector<caffe::Datum> datums;
  for (const auto& [key, value] : testing::ReadLmdb(db)) {
    if (keys != nullptr) keys->push_back(key);
    datums.emplace_back();
    EXPECT_TRUE(datums.back().ParseFromString(value)) << key;
  }
  return datums;
}

void ExpectErrorMentions(const IdxConvertOptions& options, const std::string& text) {
  try {
    ConvertIdx(options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

void CheckTinyDb(const std::string& db) {
  std::vector<std::string> keys;
  const auto datums = ReadDatums(db, &keys);
  ASSERT_EQ(datums.size(), 3u);
  EXPECT_EQ(keys, (std::vector<std::string>{"00000000", "00000001", "00000002"}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(datums[i].channels(), 1);
    EXPECT_EQ(datums[i].height(), 2);
    EXPECT_EQ(datums[i].width(), 3);
    EXPECT_EQ(datums[i].label(), (i * 3) % 10);
    ASSERT_EQ(datums[i].data().size(), 6u);
    for (int j = 0; j < 6; ++j) EXPECT_EQ(static_cast<uint8_t>(datums[i].data()[j]), 16 * i + j);
  }
}

TEST(IdxConvertTest, ConvertsPlainFiles) {
  TempDir dir;
  IdxConvertOptions options;
  options.images = Write(dir, "images", ImagesBytes(3, 2, 3));
  options.labels = Write(dir, "labels", LabelsBytes(3));
  options.out = dir / "db";
  EXPECT_EQ(ConvertIdx(options), 3);
  CheckTinyDb(options.out);
  // Only the database is left beside the inputs (no temporary directory).
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++entries;
  }
  EXPECT_EQ(entries, 3);
}

TEST(IdxConvertTest, ConvertsGzippedFiles) {
  TempDir dir;
  IdxConvertOptions options;
  options.images = WriteGz(dir, "images.gz", ImagesBytes(3, 2, 3));
  options.labels = WriteGz(dir, "labels.gz", LabelsBytes(3));
  options.out = dir / "db/";  // a trailing slash names the same directory
  EXPECT_EQ(ConvertIdx(options), 3);
  CheckTinyDb(dir / "db");
}

TEST(IdxConvertTest, ShuffleWritesAPermutation) {
  TempDir dir;
  IdxConvertOptions options;
  options.images = Write(dir, "images", ImagesBytes(12, 1, 1));
  options.labels = Write(dir, "labels", LabelsBytes(12));
  options.out = dir / "db";
  options.shuffle = true;
  options.seed = 5;
  ASSERT_EQ(ConvertIdx(options), 12);
  const auto datums = ReadDatums(options.out, nullptr);
  ASSERT_EQ(datums.size(), 12u);
  std::vector<int> items;
  for (const auto& d : datums) {
    const int item = static_cast<uint8_t>(d.data()[0]) / 16;  // pixel 0 of image i is 16 i
    EXPECT_EQ(d.label(), (item * 3) % 10);                    // labels travel with images
    items.push_back(item);
  }
  std::vector<int> sorted = items;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(12);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(items, identity);
}

TEST(IdxConvertTest, WrongMagicNamesTheFile) {
  TempDir dir;
  IdxConvertOptions options;
  options.images = Write(dir, "swapped", LabelsBytes(3));  // a label file given as images
  options.labels = Write(dir, "labels", LabelsBytes(3));
  options.out = dir / "db";
  ExpectErrorMentions(options, options.images);
  ExpectErrorMentions(options, "magic");
  EXPECT_FALSE(std::filesystem::exists(options.out));
}

TEST(IdxConvertTest, CountMismatchNamesBothFiles) {
  TempDir dir;
  IdxConvertOptions options;
  options.images = Write(dir, "images", ImagesBytes(3, 2, 3));
  options.labels = Write(dir, "labels", LabelsBytes(4));
  options.out = dir / "db";
  ExpectErrorMentions(options, options.images);
  ExpectErrorMentions(options, options.labels);
}

TEST(IdxConvertTest, TruncatedFilesNameTheFile) {
  TempDir dir;
  IdxConvertOptions options;
  const std::string images = ImagesBytes(3, 2, 3);
  options.images = Write(dir, "images", images.substr(0, images.size() - 1));
  options.labels = Write(dir, "labels", LabelsBytes(3));
  options.out = dir / "db";
  ExpectErrorMentions(options, options.images);
  // A gzip stream cut short.
  std::string gz;
  {
    const std::string full = WriteGz(dir, "full.gz", images);
    std::ifstream in(full, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  options.images = Write(dir, "cut.gz", gz.substr(0, gz.size() / 2));
  ExpectErrorMentions(options, options.images);
  // A header alone.
  options.images = Write(dir, "short", images.substr(0, 10));
  ExpectErrorMentions(options, options.images);
  EXPECT_FALSE(std::filesystem::exists(options.out));
}

TEST(IdxConvertTest, TrailingBytesAreRefused) {
  TempDir dir;
  const std::string path = Write(dir, "labels", LabelsBytes(3) + "xyz");
  try {
    ReadIdxLabels(path);
    FAIL() << "trailing bytes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the 11 bytes its header promises"),
              std::string::npos)
        << e.what();
  }
}

// A small gzip file whose header promises more than the memory tensors may hold is refused
// before its body is inflated; one that inflates to more than its header promises stops one
// byte past the promise (never inflating the rest).
TEST(IdxConvertTest, HeadersBoundWhatIsRead) {
  TempDir dir;
  std::string header;
  for (uint32_t field : {0x803u, uint32_t{INT32_MAX}, 65535u, 65535u}) PutBigEndian(&header, field);
  const std::string huge = WriteGz(dir, "huge.gz", header);
  try {
    ReadIdxImages(huge);
    FAIL() << "a header promising " << (uint64_t{INT32_MAX} * 65535 * 65535) << " bytes accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo) << e.what();
    EXPECT_NE(std::string(e.what()).find(huge), std::string::npos) << e.what();
  }
  // 64 MiB of zeros after a header promising 2 labels (10 bytes in all): compressed to about
  // 64 KiB.
  std::string bomb = LabelsBytes(2);
  bomb.append(size_t{64} << 20, '\0');
  const std::string bomb_path = WriteGz(dir, "bomb.gz", bomb);
  bomb.clear();
  bomb.shrink_to_fit();
  try {
    ReadIdxLabels(bomb_path);
    FAIL() << "trailing bytes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the 10 bytes"), std::string::npos) << e.what();
  }
}

TEST(IdxConvertTest, MissingInputIsNotFound) {
  TempDir dir;
  IdxConvertOptions options;
  options.images = dir / "absent";
  options.labels = Write(dir, "labels", LabelsBytes(3));
  options.out = dir / "db";
  try {
    ConvertIdx(options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

TEST(IdxConvertTest, ExistingOutputNeedsOverwrite) {
  TempDir dir;
  IdxConvertOptions options;
  options.images = Write(dir, "images", ImagesBytes(3, 2, 3));
  options.labels = Write(dir, "labels", LabelsBytes(3));
  options.out = dir / "db";
  std::filesystem::create_directories(options.out);
  Write(dir, "db/stale", "old");
  ExpectErrorMentions(options, "already exists");
  options.overwrite = true;
  EXPECT_EQ(ConvertIdx(options), 3);
  CheckTinyDb(options.out);
  EXPECT_FALSE(std::filesystem::exists(dir / "db/stale"));
}

TEST(IdxConvertTest, LevelDbIsUnimplemented) {
  TempDir dir;
  IdxConvertOptions options;
  options.images = Write(dir, "images", ImagesBytes(3, 2, 3));
  options.labels = Write(dir, "labels", LabelsBytes(3));
  options.out = dir / "db";
  options.backend = "leveldb";
  try {
    ConvertIdx(options);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  }
}

TEST(IdxConvertTest, CommandLineTool) {
  TempDir dir;
  const std::string images = Write(dir, "images", ImagesBytes(3, 2, 3));
  const std::string labels = Write(dir, "labels", LabelsBytes(3));
  const std::string out = dir / "db";
  const std::vector<std::string> args = {"convert_idx", "--images=" + images, "--labels", labels,
                                         "--out=" + out};
  cli_testing::CliResult result = cli_testing::RunCli(args);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(result.Contains("Wrote 3 records")) << result.output;
  CheckTinyDb(out);
  result = cli_testing::RunCli(args);  // the output exists now
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_TRUE(result.Contains("already exists (pass --overwrite")) << result.output;
  std::vector<std::string> overwrite = args;
  overwrite.push_back("--overwrite");
  result = cli_testing::RunCli(overwrite);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  CheckTinyDb(out);
}

TEST(IdxConvertTest, RealFashionMnistTestSet) {
  const std::string base = "/usr/share/datasets/fashion-mnist/";
  if (!std::filesystem::exists(base + "t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << base << " (Debian dataset-fashion-mnist)";
  }
  TempDir dir;
  IdxConvertOptions options;
  options.images = base + "t10k-images-idx3-ubyte.gz";
  options.labels = base + "t10k-labels-idx1-ubyte.gz";
  options.out = dir / "fashion_test_lmdb";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ConvertIdx(options), 10000);
  const auto datums = ReadDatums(options.out, nullptr);
  ASSERT_EQ(datums.size(), 10000u);
  // The first test item is an ankle boot (class 9), 28 x 28, pixel sum 33456 (checked with
  // Python's gzip module on the same file).
  EXPECT_EQ(datums[0].label(), 9);
  EXPECT_EQ(datums[0].height(), 28);
  EXPECT_EQ(datums[0].width(), 28);
  long sum = 0;
  for (char c : datums[0].data()) sum += static_cast<uint8_t>(c);
  EXPECT_EQ(sum, 33456);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

}  // namespace
}  // namespace cortado
