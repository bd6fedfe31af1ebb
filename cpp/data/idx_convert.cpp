// SPDX-License-Identifier: Apache-2.0
#include "data/idx_convert.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <system_error>

#include "core/context.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "data/lmdb_db.hpp"
#include "proto/caffe.pb.h"

namespace cortado {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

// Reads a whole file, inflating it when it is gzip-compressed (gzread passes plain files through).
std::vector<uint8_t> ReadMaybeGzipped(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    CORTADO_THROW(kNotFound, "IDX file '{}' does not exist or is not a regular file", path);
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) CORTADO_THROW(kIo, "cannot open IDX file '{}'", path);
  gzbuffer(file, 1 << 17);
  std::vector<uint8_t> bytes;
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    const size_t old_size = bytes.size();
    bytes.resize(old_size + kChunk);
    const int got = gzread(file, bytes.data() + old_size, static_cast<unsigned>(kChunk));
    if (got < 0) break;
    bytes.resize(old_size + static_cast<size_t>(got));
    if (got == 0) break;
  }
  int err = Z_OK;
  const char* message = gzerror(file, &err);
  const std::string error_text = message != nullptr ? message : "";
  gzclose(file);
  if (err != Z_OK) {
    CORTADO_THROW(kIo, "IDX file '{}' is corrupt or truncated: {}", path, error_text);
  }
  return bytes;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void CheckMagic(uint32_t magic, uint32_t expected, const std::string& path, const char* what) {
  if (magic != expected) {
    CORTADO_THROW(kIo, "'{}' is not an IDX {} file: magic number 0x{:08x}, expected 0x{:08x}", path,
                  what, magic, expected);
  }
}

void CheckSize(size_t have, uint64_t expected, const std::string& path, const char* what) {
  if (have != expected) {
    CORTADO_THROW(kIo, "IDX {} file '{}' holds {} bytes but its header promises {}{}", what, path,
                  have, expected, have < expected ? " (truncated?)" : "");
  }
}

void Rename(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec) {
    CORTADO_THROW(kIo, "convert_idx: cannot rename '{}' to '{}': {}", from.string(), to.string(),
                  ec.message());
  }
}

}  // namespace

IdxImages ReadIdxImages(const std::string& path) {
  const std::vector<uint8_t> bytes = ReadMaybeGzipped(path);
  if (bytes.size() < 4) CheckSize(bytes.size(), 16, path, "image");
  CheckMagic(BigEndian32(bytes.data()), kImagesMagic, path, "image");
  if (bytes.size() < 16) CheckSize(bytes.size(), 16, path, "image");
  const uint32_t count = BigEndian32(bytes.data() + 4);
  const uint32_t rows = BigEndian32(bytes.data() + 8);
  const uint32_t cols = BigEndian32(bytes.data() + 12);
  if (count > INT32_MAX || rows == 0 || cols == 0 || rows > 65535 || cols > 65535) {
    CORTADO_THROW(kIo, "IDX image file '{}' has an implausible header: {} images of {} x {}", path,
                  count, rows, cols);
  }
  CheckSize(bytes.size(), 16 + uint64_t{count} * rows * cols, path, "image");
  IdxImages images;
  images.count = static_cast<int>(count);
  images.rows = static_cast<int>(rows);
  images.cols = static_cast<int>(cols);
  images.pixels.assign(bytes.begin() + 16, bytes.end());
  return images;
}

std::vector<uint8_t> ReadIdxLabels(const std::string& path) {
  const std::vector<uint8_t> bytes = ReadMaybeGzipped(path);
  if (bytes.size() < 4) CheckSize(bytes.size(), 8, path, "label");
  CheckMagic(BigEndian32(bytes.data()), kLabelsMagic, path, "label");
  if (bytes.size() < 8) CheckSize(bytes.size(), 8, path, "label");
  const uint32_t count = BigEndian32(bytes.data() + 4);
  CheckSize(bytes.size(), 8 + uint64_t{count}, path, "label");
  return std::vector<uint8_t>(bytes.begin() + 8, bytes.end());
}

int64_t ConvertIdx(const IdxConvertOptions& options) {
  namespace fs = std::filesystem;
  if (options.images.empty() || options.labels.empty() || options.out.empty()) {
    CORTADO_THROW(kInvalidArgument, "convert_idx needs image and label files and an output path");
  }
  if (options.backend == "leveldb") {
    CORTADO_THROW(kUnimplemented, "convert_idx: the leveldb backend is not supported; use lmdb");
  }
  if (options.backend != "lmdb") {
    CORTADO_THROW(kInvalidArgument, "convert_idx: unknown backend '{}' (use lmdb)",
                  options.backend);
  }
  fs::path out(options.out);
  if (out.filename().empty()) out = out.parent_path();  // "dir/" names "dir"
  std::error_code ec;
  if (fs::exists(out, ec) && !options.overwrite) {
    CORTADO_THROW(kInvalidArgument, "output '{}' already exists and is not replaced", out.string());
  }

  const IdxImages images = ReadIdxImages(options.images);
  const std::vector<uint8_t> labels = ReadIdxLabels(options.labels);
  if (static_cast<size_t>(images.count) != labels.size()) {
    CORTADO_THROW(kInvalidArgument, "'{}' holds {} images but '{}' holds {} labels", options.images,
                  images.count, options.labels, labels.size());
  }

  std::vector<int> order(images.count);
  std::iota(order.begin(), order.end(), 0);
  if (options.shuffle) {
    Rng rng(options.seed);
    for (size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[static_cast<size_t>(rng() % i)]);
    }
  }

  const fs::path temp = out.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(temp, ec);  // a leftover from a crashed run of this process id
  const size_t image_size = static_cast<size_t>(images.rows) * images.cols;
  try {
    const size_t estimate = static_cast<size_t>(images.count) * (image_size + 64) * 2;
    LmdbWriter writer(temp.string(), "convert_idx", std::max<size_t>(size_t{1} << 26, estimate));
    caffe::Datum datum;
    datum.set_channels(1);
    datum.set_height(images.rows);
    datum.set_width(images.cols);
    std::string value;
    for (int i = 0; i < images.count; ++i) {
      const int item = order[i];
      datum.set_data(images.pixels.data() + image_size * item, image_size);
      datum.set_label(labels[item]);
      datum.SerializeToString(&value);
      writer.Put(fmt::format("{:08d}", i), value);
    }
    writer.Commit();
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }

  // Only a complete database gets the final name.
  if (fs::exists(out, ec)) {
    const fs::path old = out.string() + ".old-" + std::to_string(::getpid());
    Rename(out, old);
    Rename(temp, out);
    fs::remove_all(old, ec);
  } else {
    Rename(temp, out);
  }
  CORTADO_LOG_INFO("convert_idx: wrote {} records of 1 x {} x {} to '{}'", images.count,
                   images.rows, images.cols, out.string());
  return images.count;
}

}  // namespace cortado
