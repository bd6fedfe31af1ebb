// SPDX-License-Identifier: Apache-2.0
// FeedDataLayer: the external-input data layer that a Spark task fills with whole batches
// (DESIGN §5). Built for Caffe type "CoSData" (CaffeOnSpark) and for "MemoryData" with
// LayerParameter.source_class set (CaffeOnSpark's MemoryData fed by a JVM source class).
// A JVM thread pushes batches into the layer's BatchFeed (batch_feed.hpp), which the owner of the
// net hands out (FeedOf; Trainer::Feed, the JNI NativeNet.feed); the prefetch thread of
// BasePrefetchingDataLayer pops them, so a Forward whose batch is queued does not wait, and a
// pusher blocks while the feed is full.
//
// CoSData params: cos_data_param.batch_size (> 0) and one `top` entry per layer top, in order.
// Top i has shape [batch_size, c, h, w] cut to 1 + sample_num_axes (<= 3) axes, where c, h, w
// are out_channels/out_height/out_width when set, else channels/height/width; with transpose
// (sample_num_axes 1 only) it is [c, batch_size]. This is CaffeOnSpark's CoSDataLayer rule.
// The top's type (STRING, INT, RAW_IMAGE, ...) tells the JVM side how to turn a column into
// floats; the layer always receives floats. source, shuffle and dataframe_format are for the
// JVM side too.
// MemoryData params: memory_data_param.batch_size, channels, height, width (all > 0); tops data
// [batch_size, channels, height, width] and label [batch_size], as MemoryDataLayer.
//
// transform_param (DataTransformer: scale, mean_value, mean_file, crop_size, mirror), CoSData's
// per top and MemoryData's for its data top, is applied here, on the prefetch thread, to each
// sample as it leaves the feed: the feeder pushes raw samples of the feed shape (the top shape
// above; [batch, c, h, w] for MemoryData) and the top has the transformed shape (4-D tops get
// the crop's height and width). A sample of fewer axes counts as c x h x 1 or c x 1 x 1. Random
// crops and mirrors (TRAIN) draw from the batch's engine. A CoSData layer's own transform_param
// is not used (CaffeOnSpark reads it per top); Setup warns when one is set. Transposed tops
// take no transform.
//
// Differences from BasePrefetchingDataLayer: batches come in push order. Seek and SetShard
// change nothing: a pushed stream has no positions, and each Spark task feeds its own data, so
// a resumed task simply pushes from where its data starts. Nothing pushed is ever skipped.
// End of data and aborts: see BatchFeed; the Forward that finds the feed ended throws its
// error (kNotFound for a closed feed, kAborted for an aborted one), after every batch queued
// before a Close has been delivered. Destroying the layer aborts its feed, so a blocked pusher
// returns with kAborted.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "data/base_data_layer.hpp"
#include "data/batch_feed.hpp"
#include "data/data_transformer.hpp"

namespace cortado {

class FeedDataLayer final : public BasePrefetchingDataLayer {
 public:
  // Batches a feed queues beyond the one the prefetch thread holds ready.
  static constexpr int kFeedCapacity = 4;

  FeedDataLayer(const caffe::LayerParameter& param, Context* ctx);
  ~FeedDataLayer() override;

  // "CoSData" or "MemoryData", the type it was built for.
  const char* type() const override { return memory_data_ ? "MemoryData" : "CoSData"; }
  int ExactNumTopBlobs() const override { return memory_data_ ? 2 : -1; }

  void Seek(int64_t /*batch_index*/) override {}
  void SetShard(int /*shard*/, int /*num_shards*/) override {}

  // The feed (null before Setup); shared with the pushers.
  const std::shared_ptr<BatchFeed>& feed() const { return feed_; }

  // Whether a layer of these parameters is a feed layer: CoSData, or MemoryData with
  // source_class.
  static bool IsFeedLayer(const caffe::LayerParameter& param);
  // The feed shapes (what the feeder pushes, batch axis included) of a feed layer's parameters,
  // by the rules above; errors start with `owner`.
  static std::vector<std::vector<int>> FeedShapesOf(const caffe::LayerParameter& param,
                                                    const std::string& owner);

 protected:
  void DataSetup(const std::vector<Tensor*>& top) override;
  void LoadBatch(int64_t index, Rng* rng, DataBatch* batch) override;
  int PrefetchCount() const override { return 1; }

 private:
  // Feed shapes (what the feeder pushes) from cos_data_param or memory_data_param.
  std::vector<std::vector<int>> FeedShapes() const;
  // The transform_param of top i, or null.
  const caffe::TransformationParameter* TransformOf(int top) const;

  const bool memory_data_;
  std::shared_ptr<BatchFeed> feed_;
  // Per top: its transformer (null: values pass as pushed), and the sample's c, h, w.
  std::vector<std::unique_ptr<DataTransformer>> transformers_;
  std::vector<std::array<int, 3>> sample_chw_;
  std::vector<std::vector<int>> top_shapes_;
};

// The feed of `layer` when it is a feed layer that is set up; null otherwise.
std::shared_ptr<BatchFeed> FeedOf(const Layer& layer);

}  // namespace cortado
