// SPDX-License-Identifier: Apache-2.0
#include "data/data_layer.hpp"

#include <algorithm>

#include "core/logging.hpp"
#include "data/datum_db.hpp"

namespace cortado {

DataLayer::~DataLayer() { StopPrefetch(); }

int DataLayer::PrefetchCount() const {
  return std::max(1, static_cast<int>(param_.data_param().prefetch()));
}

void DataLayer::DataSetup(const std::vector<Tensor*>& top) {
  const auto& p = param_.data_param();
  if (p.backend() != caffe::DataParameter::LMDB) {
    CORTADO_THROW(kUnimplemented,
                  "{}: data_param.backend is LEVELDB (the default when unset); Cortado reads "
                  "LMDB only: convert the data to LMDB and set 'backend: LMDB'",
                  Describe());
  }
  if (p.source().empty()) {
    CORTADO_THROW(kInvalidArgument, "{}: data_param.source is empty", Describe());
  }
  if (p.batch_size() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: data_param.batch_size must be positive", Describe());
  }
  batch_size_ = static_cast<int>(p.batch_size());
  output_labels_ = top.size() > 1;
  transformer_ = std::make_unique<DataTransformer>(param_.transform_param(), phase(), Describe());
  reader_ = std::make_unique<LmdbReader>(p.source(), Describe());
  db_size_ = reader_->size();

  // The first record fixes the shape of every batch.
  std::string key;
  const std::string_view value = reader_->Next(&key);
  caffe::Datum datum;
  ParseRecord(value, key, &datum);
  datum_shape_ = {datum.channels(), datum.height(), datum.width()};
  item_shape_ = transformer_->InferShape(datum);
  reader_->SeekTo(0);

  skip_ = 0;
  if (p.rand_skip() > 0) skip_ = static_cast<int64_t>(ctx_->rng()() % p.rand_skip());
  if (skip_ > 0) CORTADO_LOG_INFO("{}: skipping the first {} records", Describe(), skip_);

  top[0]->Reshape({batch_size_, item_shape_[0], item_shape_[1], item_shape_[2]});
  if (output_labels_) top[1]->Reshape(std::vector<int>{batch_size_});
  CORTADO_LOG_INFO("{}: output data size: {},{},{},{} from '{}' ({} records)", Describe(),
                   batch_size_, item_shape_[0], item_shape_[1], item_shape_[2], p.source(),
                   db_size_);
}

void DataLayer::ParseRecord(std::string_view value, const std::string& key,
                            caffe::Datum* datum) const {
  // An encoded record is decoded here, in the prefetch thread (and once at Setup for the shape).
  ParseDatumRecord(value, key, reader_->path(), Describe(), datum_shape_, datum,
                   DecodeColorMode(param_.transform_param()));
}

void DataLayer::LoadBatch(int64_t index, Rng* rng, DataBatch* batch) {
  const int num_tops = output_labels_ ? 2 : 1;
  batch->shapes.resize(num_tops);
  batch->tops.resize(num_tops);
  batch->shapes[0] = {batch_size_, item_shape_[0], item_shape_[1], item_shape_[2]};
  const size_t item_count = static_cast<size_t>(item_shape_[0]) * item_shape_[1] * item_shape_[2];
  batch->tops[0].resize(item_count * batch_size_);
  if (output_labels_) {
    batch->shapes[1] = {batch_size_};
    batch->tops[1].resize(batch_size_);
  }
  // Consecutive batches continue where the cursor is; a Seek costs one walk from the start.
  reader_->SeekTo((skip_ + index * batch_size_) % db_size_);
  caffe::Datum datum;
  std::string key;
  for (int i = 0; i < batch_size_; ++i) {
    const std::string_view value = reader_->Next(&key);
    ParseRecord(value, key, &datum);
    transformer_->Transform(datum, batch->tops[0].data() + item_count * i, rng);
    if (output_labels_) batch->tops[1][i] = static_cast<float>(datum.label());
  }
}

CORTADO_REGISTER_LAYER(Data, DataLayer);

}  // namespace cortado
