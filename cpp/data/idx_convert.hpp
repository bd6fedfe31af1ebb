// SPDX-License-Identifier: Apache-2.0
// Converting IDX files (the MNIST / Fashion-MNIST format) into a database of caffe::Datum, as
// Caffe's convert_mnist_data does. Used by `cortado convert_idx`.
//
// IDX layout (all integers big-endian): images: magic 0x00000803, count, rows, cols, then
// count*rows*cols uint8 pixels; labels: magic 0x00000801, count, then count uint8 labels. Files
// may be gzip-compressed (as distributed); zlib reads both forms.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cortado {

struct IdxImages {
  int count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // count x rows x cols
};

// Read an IDX image or label file. Throw kNotFound for a missing file and kIo naming the file
// for an unreadable or corrupt gzip stream, a wrong magic number, or a size that does not match
// the header (truncated or with trailing bytes).
IdxImages ReadIdxImages(const std::string& path);
std::vector<uint8_t> ReadIdxLabels(const std::string& path);

struct IdxConvertOptions {
  std::string images;  // IDX image file
  std::string labels;  // IDX label file (same count)
  std::string out;     // database directory to create
  std::string backend = "lmdb";
  bool shuffle = false;  // write the records in a random order (seeded by `seed`)
  uint32_t seed = 0;
  bool overwrite = false;  // replace an existing `out`
};

// Writes one Datum per image (channels 1, height rows, width cols, uint8 data, label) under
// keys "%08d" (0, 1, ...). The database is built in a temporary directory beside `out` and
// renamed into place only when complete. An existing `out` is an error unless overwrite is set;
// backend "leveldb" is kUnimplemented. Returns the number of records written.
int64_t ConvertIdx(const IdxConvertOptions& options);

}  // namespace cortado
