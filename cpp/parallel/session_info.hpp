// SPDX-License-Identifier: Apache-2.0
// What a driver asks of a net before any training session exists (the Spark driver plans its
// tasks with it, through the JNI): a phase's net as Caffe filters it, its data layers with the
// shapes a feeder pushes, its output blobs and its blobs. Computed from the NetParameter alone:
// nothing is allocated, no data source is opened.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "proto/caffe.pb.h"

namespace cortado {

class BatchFeed;
class Net;

// A data layer of a phase's net (a layer whose type ends in "Data": CoSData, MemoryData, Data,
// ImageData, HDF5Data, ...). Vectors run over the layer's tops.
struct DataLayerInfo {
  std::string name;
  std::string type;
  std::string source_class;  // LayerParameter.source_class (CaffeOnSpark); empty when unset
  bool feed = false;         // CoSData, or MemoryData with source_class: the JVM fills it
  // cos_data_param, memory_data_param, data_param, image_data_param or hdf5_data_param source.
  std::string source;
  // cos_data_param's or memory_data_param's dataframe_format when set
  std::string dataframe_format;
  // memory_data_param's dataframe_column_select and image_encoded (CaffeOnSpark's
  // ImageDataFrame source)
  std::vector<std::string> column_select;
  bool image_encoded = false;
  std::vector<std::string> tops;
  std::vector<std::string> columns;    // a CoSData top's name, else the top's name
  std::vector<std::string> top_types;  // a CoSData top's type name ("INT"), else empty
  std::vector<bool> transposed;        // a CoSData top's transpose
  // A feed layer's sample shape per top as pushed (FeedDataLayer's rule, no batch axis).
  std::vector<std::vector<int>> sample_shapes;
  int batch_size = 0;  // a feed layer's batch size
  int crop_size = 0;   // the layer's transform_param.crop_size; 0 when unset
};

// Every layer type of `net` (any phase) is one the engine knows, else kInvalidArgument naming
// `source`, the layer, its type and the known types: what building the net would find first,
// without opening data sources or allocating anything.
void CheckLayerTypes(const caffe::NetParameter& net, const std::string& source);

// `param` for `phase`: its state's phase set (the net's own level and stages kept) and its
// layers filtered by their include/exclude rules, as Net builds it.
caffe::NetParameter NetForPhase(const caffe::NetParameter& param, caffe::Phase phase);

// `param` (a whole net, every phase) with the batch size of feed layer `layer` of the `phase`
// net set to `batch`: cos_data_param's or memory_data_param's batch_size. The other phase's
// layers are left as they are. kNotFound when the phase's net has no feed layer of that name,
// kInvalidArgument for a batch below 1; both name `source`.
caffe::NetParameter WithFeedBatchSize(const caffe::NetParameter& param, caffe::Phase phase,
                                      const std::string& layer, int batch,
                                      const std::string& source);

// The data layers of a phase's net, in order; feed-layer errors (bad shapes) start with
// "<source>: layer '<name>' (<type>)".
std::vector<DataLayerInfo> DescribeDataLayers(const caffe::NetParameter& phase_net,
                                              const std::string& source);

// The blobs no later layer reads (Caffe's net outputs), in the order they are produced.
std::vector<std::string> OutputBlobNames(const caffe::NetParameter& phase_net);

// Every top of a phase's net, once each, in order.
std::vector<std::string> BlobNames(const caffe::NetParameter& phase_net);

// A built net's feed queues, for whoever owns the net (a Trainer's replica, a JNI NativeNet):
// each set-up feed layer's queue under its phase-qualified name ("TRAIN/data").
using NamedFeed = std::pair<std::string, std::shared_ptr<BatchFeed>>;
// Appends those of `net`, in layer order.
void AppendFeeds(const Net& net, std::vector<NamedFeed>* feeds);
// The names of `feeds`, sorted.
std::vector<std::string> FeedNames(const std::vector<NamedFeed>& feeds);
// The feed of `layer`: "TRAIN/data", "TEST/data", or a plain name meaning the TRAIN net's,
// else the TEST net's. None is kNotFound: "<owner> has no feed layer '<layer>' (its feed
// layers: ...)".
std::shared_ptr<BatchFeed> FindFeed(const std::vector<NamedFeed>& feeds, const std::string& layer,
                                    const std::string& owner);

}  // namespace cortado
