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
#include "core/host_memory.hpp"
#include "core/logging.hpp"
#include "data/lmdb_db.hpp"
#include "proto/caffe.pb.h"

namespace cortado {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void CheckMagic(uint32_t magic, uint32_t expected, const std::string& path, const char* what) {
  if (magic != expected) {
    CORTADO_THROW(kIo, "'{}' is not an IDX {} file: magic number 0x{:08x}, expected 0x{:08x}", path,
                  what, magic, expected);
  }
}

// `have`: the bytes read, which stop one byte past what the header promises.
void CheckSize(size_t have, uint64_t expected, const std::string& path, const char* what) {
  if (have < expected) {
    CORTADO_THROW(kIo, "IDX {} file '{}' holds {} bytes but its header promises {} (truncated?)",
                  what, path, have, expected);
  }
  if (have > expected) {
    CORTADO_THROW(kIo, "IDX {} file '{}' holds more than the {} bytes its header promises", what,
                  path, expected);
  }
}

class GzipReader {
 public:
  explicit GzipReader(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      CORTADO_THROW(kNotFound, "IDX file '{}' does not exist or is not a regular file", path);
    }
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) CORTADO_THROW(kIo, "cannot open IDX file '{}'", path);
    gzbuffer(file_, 1 << 17);
  }
  ~GzipReader() { gzclose(file_); }
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;

  // Appends up to `n` bytes (fewer at the end of the data) to `bytes`, in chunks, so that memory
  // grows with what the file holds rather than with what a header claims.
  void Append(uint64_t n, std::vector<uint8_t>* bytes) {
    constexpr uint64_t kChunk = 1 << 20;
    while (n > 0) {
      const size_t want = static_cast<size_t>(std::min(n, kChunk));
      const size_t old_size = bytes->size();
      bytes->resize(old_size + want);
      const int got = gzread(file_, bytes->data() + old_size, static_cast<unsigned>(want));
      if (got < 0) {
        bytes->resize(old_size);
        ThrowIfFailed();
        return;
      }
      bytes->resize(old_size + static_cast<size_t>(got));
      if (static_cast<size_t>(got) < want) break;
      n -= want;
    }
    ThrowIfFailed();
  }

 private:
  void ThrowIfFailed() {
    int err = Z_OK;
    const char* message = gzerror(file_, &err);
    if (err != Z_OK) {
      CORTADO_THROW(kIo, "IDX file '{}' is corrupt or truncated: {}", path_,
                    message != nullptr ? message : "");
    }
  }

  std::string path_;
  gzFile file_ = nullptr;
};

// Reads an IDX file, inflating it when it is gzip-compressed (gzread passes plain files
// through): the `header_size` bytes of its header, then the body whose size `body_size` derives
// from them, and no more than one byte beyond it (to tell trailing bytes). A body larger than
// the memory tensors may hold is refused before any of it is read.
template <typename BodySize>
std::vector<uint8_t> ReadIdx(const std::string& path, const char* what, size_t header_size,
                             BodySize&& body_size) {
  GzipReader reader(path);
  std::vector<uint8_t> bytes;
  reader.Append(header_size, &bytes);
  const uint64_t body = body_size(bytes);  // checks the header
  if (body > HostMemoryLimit()) {
    CORTADO_THROW(kIo,
                  "IDX {} file '{}': its header promises {} bytes of data, more than the {} bytes "
                  "of memory this process may use",
                  what, path, body, HostMemoryLimit());
  }
  reader.Append(body + 1, &bytes);
  return bytes;
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
  IdxImages images;
  const std::vector<uint8_t> bytes =
      ReadIdx(path, "image", 16, [&](const std::vector<uint8_t>& header) -> uint64_t {
        if (header.size() < 4) CheckSize(header.size(), 16, path, "image");
        CheckMagic(BigEndian32(header.data()), kImagesMagic, path, "image");
        if (header.size() < 16) CheckSize(header.size(), 16, path, "image");
        const uint32_t count = BigEndian32(header.data() + 4);
        const uint32_t rows = BigEndian32(header.data() + 8);
        const uint32_t cols = BigEndian32(header.data() + 12);
        if (count > INT32_MAX || rows == 0 || cols == 0 || rows > 65535 || cols > 65535) {
          CORTADO_THROW(kIo, "IDX image file '{}' has an implausible header: {} images of {} x {}",
                        path, count, rows, cols);
        }
        images.count = static_cast<int>(count);
        images.rows = static_cast<int>(rows);
        images.cols = static_cast<int>(cols);
        return uint64_t{count} * rows * cols;
      });
  CheckSize(bytes.size(),
            16 + uint64_t{static_cast<uint32_t>(images.count)} * images.rows * images.cols, path,
            "image");
  images.pixels.assign(bytes.begin() + 16, bytes.end());
  return images;
}

std::vector<uint8_t> ReadIdxLabels(const std::string& path) {
  uint64_t count = 0;
  const std::vector<uint8_t> bytes =
      ReadIdx(path, "label", 8, [&](const std::vector<uint8_t>& header) -> uint64_t {
        if (header.size() < 4) CheckSize(header.size(), 8, path, "label");
        CheckMagic(BigEndian32(header.data()), kLabelsMagic, path, "label");
        if (header.size() < 8) CheckSize(header.size(), 8, path, "label");
        count = BigEndian32(header.data() + 4);
        return count;
      });
  CheckSize(bytes.size(), 8 + count, path, "label");
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
