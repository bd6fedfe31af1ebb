// SPDX-License-Identifier: Apache-2.0
// Reading caffe::Datum records from an LMDB database: the parsing and checks of one record that
// the Data layer and DatumDbReader share, and DatumDbReader, which decodes ranges of records by
// index into float arrays (what a Spark task reading its share of a database needs; see
// jni/native_lmdb_jni.cpp).
//
// Encoded datums (`encoded: true`: a JPEG or PNG file, what `convert_imageset --encoded` writes)
// are decoded while parsed (image_codec.hpp), in the calling thread, and then checked as raw
// ones; a corrupt image fails naming its key and the database.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/data_transformer.hpp"
#include "data/image_codec.hpp"
#include "data/lmdb_db.hpp"
#include "proto/caffe.pb.h"

namespace cortado {

// Parses `value`, the record `key` of the LMDB database at `path`, into `datum`, and checks it:
// an encoded datum (a JPEG or PNG file, `encoded: true`) is decoded into a raw one (channels as
// `color` says: Caffe's force_color / force_gray), failing as DecodeImage does (kParse for a
// corrupt or truncated image); then it must be of shape `shape` = {C, H, W} unless `shape` is
// empty, and hold C*H*W values (uint8 `data` bytes, or `float_data` when `data` is empty). Every
// other failure is kIo. Messages start with `owner` and name the key and the path.
void ParseDatumRecord(std::string_view value, const std::string& key, const std::string& path,
                      const std::string& owner, const std::vector<int>& shape, caffe::Datum* datum,
                      ColorMode color = ColorMode::kKeep);

// Random access by record index to an LMDB database of caffe::Datum records of one shape (raw,
// or encoded ones decoded as they are stored: ColorMode::kKeep).
// Not thread-safe; one thread at a time may use it (it may move between threads).
class DatumDbReader {
 public:
  // Opens the database at `path` read-only and parses its first record, whose shape every
  // record must have. `owner` starts error messages. Throws as LmdbReader does (kNotFound for a
  // missing path, kIo for a directory that is no database, kInvalidArgument for an empty one)
  // and as ParseDatumRecord does for the first record.
  DatumDbReader(const std::string& path, std::string owner);

  // Number of records.
  int64_t size() const { return reader_.size(); }
  // {channels, height, width} of every record.
  const std::vector<int>& shape() const { return shape_; }
  // Values per record: channels * height * width.
  int64_t sample_size() const;
  const std::string& path() const { return reader_.path(); }

  // Decodes records [start, start + n) in key order: `data` receives n * sample_size() floats,
  // record after record in C x H x W order (uint8 bytes as their values 0..255, or float_data
  // as stored), `labels` the n labels, and `keys`, when not null, the n keys (replacing its
  // contents). The range must lie within [0, size()) (kInvalidArgument). A record that fails
  // ParseDatumRecord (another shape, a corrupt image or record) throws naming its key and the path;
  // `data` and `labels` then hold the records before it. The cursor steps forward from where
  // the previous read ended; a start before that walks from the first record again.
  void Read(int64_t start, int64_t n, float* data, int32_t* labels, std::vector<std::string>* keys);

 private:
  std::string owner_;
  LmdbReader reader_;
  DataTransformer decoder_;  // default parameters: the values as stored, converted to float
  std::vector<int> shape_;
};

}  // namespace cortado
