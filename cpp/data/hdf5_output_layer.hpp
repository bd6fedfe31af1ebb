// SPDX-License-Identifier: Apache-2.0
// HDF5Output (Caffe type "HDF5Output"): writes its two bottoms to an HDF5 file, the file
// HDF5Data reads (datasets named like its tops). Built only WITH_HDF5.
// Params: hdf5_output_param.file_name (required).
// Bottoms: data and label, each with at most 4 axes and the same first dimension N. Tops: none.
// Setup creates the file empty (as Caffe's H5Fcreate with H5F_ACC_TRUNC does), so a path that
// cannot be written fails at once. Every Forward then writes the whole file anew, holding two
// float datasets (H5T_NATIVE_FLOAT, as Caffe's float build writes them):
//   "data"  of the data bottom's legacy 4-D shape (num, channels, height, width): [N, C] is
//           written as [N, C, 1, 1], as Caffe's Blob::Reshape(num, channels, height, width) does;
//   "label" of the label bottom's legacy 4-D shape likewise ([N] becomes [N, 1, 1, 1]).
// Each write goes to "<file_name>.tmp.<pid>" and is renamed into place, so the file is never
// half written; on a failure the temporary is removed. Backward does nothing (no gradient).
// No GPU passes (Caffe's only copy to the host): on a GPU context the base class's host
// fallback reads the bottoms through host copies.
//
// Differences from Caffe: Caffe keeps the file open and creates the datasets in it at the first
// Forward, so a second Forward fails to create them again and aborts the process (and the file
// is complete only once the layer is destroyed); Cortado rewrites the file at every Forward, so
// it always holds the last batch. Bottoms with more than 4 axes, or with different first
// dimensions, throw kInvalidArgument naming the layer and the shapes (Caffe CHECK-fails);
// a file that cannot be written throws kIo naming the layer and the file.
#pragma once

#include <string>
#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class HDF5OutputLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "HDF5Output"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 0; }
  bool BackwardReadsBottomData(int /*index*/) const override { return false; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

  const std::string& file_name() const { return file_name_; }

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& /*top*/, const std::vector<bool>& /*propagate_down*/,
                   const std::vector<Tensor*>& /*bottom*/) override {}

 private:
  void CheckBottoms(const std::vector<Tensor*>& bottom) const;

  std::string file_name_;
};

}  // namespace cortado
