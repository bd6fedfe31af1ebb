// SPDX-License-Identifier: Apache-2.0
// Data (Caffe type "Data"): reads serialized caffe::Datum records from an LMDB database in key
// order, transforms them with transform_param (see data_transformer.hpp) and prefetches batches
// on a background thread (see base_data_layer.hpp).
// Params: data_param.source (the LMDB directory), batch_size, backend (LMDB; LEVELDB, the proto
// default, is kUnimplemented), rand_skip, prefetch (batches kept ready, default 4);
// transform_param.
// Bottoms: none. Tops: data [batch_size, C, H', W'] (H', W' = crop_size when cropping) and,
// optionally, label [batch_size].
// Records are read in key order and wrap around at the end of the database. Encoded records
// (JPEG or PNG, `convert_imageset --encoded`) are decoded in the prefetch thread, into 3 channels
// with transform_param.force_color, 1 with force_gray, else as stored (see image_codec.hpp); a
// corrupt one fails the batch, naming its key.
//
// Differences from Caffe: rand_skip skips a number of records drawn once at Setup from the
// layer's seed, uniform in [0, rand_skip) as Caffe does, so it is repeatable under a fixed seed.
// Every datum must have the shape of the first record (Caffe reshapes per batch). Batch k starts
// at record (skip + k * batch_size) mod size, so Seek(k) reproduces an uninterrupted run.
#pragma once

#include <memory>
#include <vector>

#include "data/base_data_layer.hpp"
#include "data/data_transformer.hpp"
#include "data/lmdb_db.hpp"

namespace cortado {

class DataLayer final : public BasePrefetchingDataLayer {
 public:
  using BasePrefetchingDataLayer::BasePrefetchingDataLayer;
  ~DataLayer() override;

  const char* type() const override { return "Data"; }
  int MaxTopBlobs() const override { return 2; }

  // Records skipped at the start (drawn from the seed when rand_skip > 0).
  int64_t skip() const { return skip_; }
  // Records in the database.
  int64_t db_size() const { return db_size_; }

 protected:
  void DataSetup(const std::vector<Tensor*>& top) override;
  void LoadBatch(int64_t index, Rng* rng, DataBatch* batch) override;
  int PrefetchCount() const override;

 private:
  void ParseRecord(std::string_view value, const std::string& key, caffe::Datum* datum) const;

  std::unique_ptr<DataTransformer> transformer_;
  std::unique_ptr<LmdbReader> reader_;  // used by the prefetch thread after DataSetup
  int batch_size_ = 0;
  bool output_labels_ = false;
  int64_t skip_ = 0;
  int64_t db_size_ = 0;
  std::vector<int> datum_shape_;  // C, H, W of every record
  std::vector<int> item_shape_;   // C, H', W' after the transform
};

}  // namespace cortado
