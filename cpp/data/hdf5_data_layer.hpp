// SPDX-License-Identifier: Apache-2.0
// HDF5Data (Caffe type "HDF5Data"): serves batches of rows from datasets in HDF5 files, one
// dataset per top, named like the top ("data", "label", ...). Built only WITH_HDF5.
// Params: hdf5_data_param.source (a text file listing .h5 files, one per line; blank lines are
// skipped; paths are used as written, as in Caffe), batch_size, shuffle.
// Datasets: float, double or integer (converted to float), at least one axis; the first axis
// counts samples and must agree between the tops of a file; the other axes must agree between
// files. Bottoms: none. Tops: one per dataset, [batch_size, dims[1:]...].
// Rows run through the files in list order and wrap around at the end. With shuffle, each pass
// over the data (epoch) takes the files in a random order and each file's rows in a random order,
// both drawn from the layer's seed and the epoch number (files are not interleaved, as in Caffe).
// Files are read whole, one at a time, on the prefetch thread (see base_data_layer.hpp).
//
// Differences from Caffe: batches are prefetched on a thread (Caffe reads in Forward); the
// shuffles are functions of (seed, epoch), so Seek(k) reproduces an uninterrupted run.
#pragma once

#include <string>
#include <vector>

#include "data/base_data_layer.hpp"

namespace cortado {

class HDF5DataLayer final : public BasePrefetchingDataLayer {
 public:
  using BasePrefetchingDataLayer::BasePrefetchingDataLayer;
  ~HDF5DataLayer() override;

  const char* type() const override { return "HDF5Data"; }

  // Rows over all files.
  int64_t total_rows() const { return total_rows_; }

 protected:
  void DataSetup(const std::vector<Tensor*>& top) override;
  void LoadBatch(int64_t index, Rng* rng, DataBatch* batch) override;

 private:
  // Producer-side state: the file order of one epoch, and the file currently in memory.
  struct EpochOrder {
    int64_t epoch = -1;
    std::vector<int> files;      // file indices in reading order
    std::vector<int64_t> start;  // first global row (within the epoch) of each entry of `files`
  };
  struct LoadedFile {
    int64_t epoch = -1;
    int file = -1;
    std::vector<std::vector<float>> data;  // per top, rows x row_size
    std::vector<int64_t> rows;             // reading position -> row in the file
  };

  void PrepareEpoch(int64_t epoch);
  void LoadFile(int64_t epoch, int file);

  std::vector<std::string> files_;
  std::vector<int64_t> file_rows_;
  std::vector<std::string> dataset_names_;    // per top
  std::vector<std::vector<int>> row_shapes_;  // per top, dims after the first
  std::vector<size_t> row_sizes_;             // per top, values per row
  int64_t total_rows_ = 0;
  int batch_size_ = 0;
  bool shuffle_ = false;

  EpochOrder order_;
  LoadedFile loaded_;
};

}  // namespace cortado
