// SPDX-License-Identifier: Apache-2.0
#include "data/datum_db.hpp"

#include <utility>

#include "core/error.hpp"

namespace cortado {

void ParseDatumRecord(std::string_view value, const std::string& key, const std::string& path,
                      const std::string& owner, const std::vector<int>& shape, caffe::Datum* datum,
                      ColorMode color) {
  if (!datum->ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    CORTADO_THROW(kIo, "{}: record '{}' of LMDB database '{}' is not a valid Datum ({} bytes)",
                  owner, key, path, value.size());
  }
  if (datum->encoded()) {
    // Decoded here, in the thread that reads the record (a data layer's prefetch thread).
    DecodedImage image =
        DecodeImage(datum->data().data(), datum->data().size(), color,
                    fmt::format("{}: record '{}' of LMDB database '{}'", owner, key, path));
    datum->set_encoded(false);
    datum->set_channels(image.channels);
    datum->set_height(image.height);
    datum->set_width(image.width);
    datum->mutable_data()->assign(reinterpret_cast<const char*>(image.pixels.data()),
                                  image.pixels.size());
    datum->clear_float_data();
  }
  if (!shape.empty() && (datum->channels() != shape[0] || datum->height() != shape[1] ||
                         datum->width() != shape[2])) {
    CORTADO_THROW(kIo,
                  "{}: record '{}' of LMDB database '{}' is {} x {} x {}, but the first record "
                  "is {} x {} x {}",
                  owner, key, path, datum->channels(), datum->height(), datum->width(), shape[0],
                  shape[1], shape[2]);
  }
  const size_t expected = static_cast<size_t>(datum->channels()) * datum->height() * datum->width();
  const size_t have =
      datum->data().empty() ? static_cast<size_t>(datum->float_data_size()) : datum->data().size();
  if (have != expected) {
    CORTADO_THROW(kIo,
                  "{}: record '{}' of LMDB database '{}' holds {} values for shape {} x {} x {}",
                  owner, key, path, have, datum->channels(), datum->height(), datum->width());
  }
}

namespace {

caffe::TransformationParameter NoTransform() { return caffe::TransformationParameter(); }

}  // namespace

DatumDbReader::DatumDbReader(const std::string& path, std::string owner)
    : owner_(std::move(owner)),
      reader_(path, owner_),
      decoder_(NoTransform(), caffe::TEST, owner_) {
  std::string key;
  const std::string_view value = reader_.Next(&key);
  caffe::Datum datum;
  ParseDatumRecord(value, key, reader_.path(), owner_, {}, &datum);
  shape_ = {datum.channels(), datum.height(), datum.width()};
  reader_.SeekTo(0);
}

int64_t DatumDbReader::sample_size() const {
  return static_cast<int64_t>(shape_[0]) * shape_[1] * shape_[2];
}

void DatumDbReader::Read(int64_t start, int64_t n, float* data, int32_t* labels,
                         std::vector<std::string>* keys) {
  if (start < 0 || n < 0 || start > size() || n > size() - start) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: records [{}, {}) are not within LMDB database '{}' of {} records", owner_,
                  start, start + n, path(), size());
  }
  if (keys != nullptr) keys->clear();
  if (n == 0) return;
  reader_.SeekTo(start);
  const int64_t sample = sample_size();
  caffe::Datum datum;
  std::string key;
  for (int64_t i = 0; i < n; ++i) {
    const std::string_view value = reader_.Next(&key);
    ParseDatumRecord(value, key, path(), owner_, shape_, &datum);
    // No crop or mirror: the decoder draws nothing from the engine.
    decoder_.Transform(datum, data + i * sample, nullptr);
    labels[i] = datum.label();
    if (keys != nullptr) keys->push_back(key);
  }
}

}  // namespace cortado
