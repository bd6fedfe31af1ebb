// SPDX-License-Identifier: Apache-2.0
// A net's weights in and out: copied from a trained net (.caffemodel or HDF5, by layer name),
// shared with another net of the same model, and written to a NetParameter. Building the net
// is in net.cpp, running it in net_run.cpp.
#include <cmath>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "io/hdf5_io.hpp"
#include "io/proto_io.hpp"
#include "net/net.hpp"

namespace cortado {
namespace {

// Weights holding NaN or infinity come from a damaged file or a diverged run; either way the net
// cannot use them. CORTADO_ALLOW_NONFINITE_LOSS=1 (which lets training go on through a
// non-finite loss) lets them load too.
void CheckFinite(const Tensor& blob, const std::string& layer, const char* type, int index) {
  if (NonFiniteAllowed()) return;
  const float* data = blob.cpu_data();
  for (int i = 0; i < blob.count(); ++i) {
    if (!std::isfinite(data[i])) {
      CORTADO_THROW(kInvalidArgument,
                    "copying weights into layer '{}' ({}): blob {} holds {} at index {}: the file "
                    "is damaged or comes from a diverged run (CORTADO_ALLOW_NONFINITE_LOSS=1 "
                    "loads it regardless)",
                    layer, type, index, data[i], i);
    }
  }
}

}  // namespace

void Net::CopyTrainedLayersFrom(const caffe::NetParameter& trained) {
  for (const auto& source : trained.layer()) {
    auto it = layer_index_.find(source.name());
    if (it == layer_index_.end()) {
      CORTADO_LOG_DEBUG("ignoring source layer '{}'", source.name());
      continue;
    }
    Layer* target = layers_[it->second].get();
    auto& blobs = target->blobs();
    if (static_cast<int>(blobs.size()) != source.blobs_size()) {
      CORTADO_THROW(kInvalidArgument,
                    "copying weights into layer '{}' ({}): the source has {} blob(s), the net {}",
                    source.name(), target->type(), source.blobs_size(), blobs.size());
    }
    for (int j = 0; j < source.blobs_size(); ++j) {
      const caffe::BlobProto& blob = source.blobs(j);
      const bool placeholder = !blob.has_shape() && !blob.has_num() && blob.data_size() == 0 &&
                               blob.double_data_size() == 0;
      if (placeholder && param_owners_[param_id_vecs_[it->second][j]] != -1) {
        continue;  // Caffe's HDF5 files leave out parameters a layer shares with an earlier one
      }
      if (!blobs[j]->ShapeEquals(source.blobs(j))) {
        CORTADO_THROW(kInvalidArgument,
                      "copying weights into layer '{}' ({}): blob {} has shape {} in the source "
                      "but {} in the net",
                      source.name(), target->type(), j, ProtoShapeString(source.blobs(j)),
                      blobs[j]->ShapeString());
      }
      blobs[j]->FromProto(source.blobs(j), false);
      CheckFinite(*blobs[j], source.name(), target->type(), j);
    }
  }
}

void Net::CopyTrainedLayersFrom(const std::string& path) {
  caffe::NetParameter trained = io::IsHdf5File(path) ? io::ReadNetParameterHdf5(path)
                                                     : io::ReadNetParameterFromBinaryFile(path);
  WithContext(path, [&] { CopyTrainedLayersFrom(trained); });
}

void Net::ShareTrainedLayersWith(const Net& other) {
  for (size_t i = 0; i < other.layers_.size(); ++i) {
    auto it = layer_index_.find(other.layer_names_[i]);
    if (it == layer_index_.end()) continue;
    auto& source = other.layers_[i]->blobs();
    auto& target = layers_[it->second]->blobs();
    CORTADO_CHECK_EQ(source.size(), target.size(), "sharing layer '{}'", other.layer_names_[i]);
    for (size_t j = 0; j < source.size(); ++j) {
      if (source[j]->shape() != target[j]->shape()) {
        CORTADO_THROW(kInvalidArgument, "cannot share layer '{}' blob {}: shape {} vs {}",
                      other.layer_names_[i], j, source[j]->ShapeString(), target[j]->ShapeString());
      }
      target[j]->ShareData(*source[j]);
    }
  }
}

void Net::ToProto(caffe::NetParameter* param, bool write_diff) const {
  param->Clear();
  param->set_name(name_);
  for (const auto& layer : layers_) {
    layer->ToProto(param->add_layer(), write_diff);
  }
}

}  // namespace cortado