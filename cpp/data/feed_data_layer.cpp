// SPDX-License-Identifier: Apache-2.0
#include "data/feed_data_layer.hpp"

#include "core/logging.hpp"

namespace cortado {

FeedDataLayer::FeedDataLayer(const caffe::LayerParameter& param, Context* ctx)
    : BasePrefetchingDataLayer(param, ctx), memory_data_(param.type() == "MemoryData") {}

FeedDataLayer::~FeedDataLayer() {
  FeedRegistry::Get().Unregister(this);
  // Wakes the prefetch thread (blocked in Pop) and any blocked pusher before the join.
  if (feed_) feed_->Abort(Describe() + " was destroyed");
  StopPrefetch();
}

std::vector<std::vector<int>> FeedDataLayer::TopShapes() const {
  std::vector<std::vector<int>> shapes;
  if (memory_data_) {
    const auto& p = param_.memory_data_param();
    if (p.batch_size() == 0 || p.channels() == 0 || p.height() == 0 || p.width() == 0) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: memory_data_param batch_size, channels, height and width must all be "
                    "positive, got {}, {}, {}, {}",
                    Describe(), p.batch_size(), p.channels(), p.height(), p.width());
    }
    const int b = static_cast<int>(p.batch_size());
    shapes.push_back({b, static_cast<int>(p.channels()), static_cast<int>(p.height()),
                      static_cast<int>(p.width())});
    shapes.push_back({b});
    return shapes;
  }
  const auto& p = param_.cos_data_param();
  if (!param_.has_cos_data_param() || p.batch_size() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: cos_data_param.batch_size must be positive", Describe());
  }
  if (p.top_size() != param_.top_size()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the layer has {} tops but cos_data_param describes {}; they must match",
                  Describe(), param_.top_size(), p.top_size());
  }
  const int b = static_cast<int>(p.batch_size());
  for (int i = 0; i < p.top_size(); ++i) {
    const auto& t = p.top(i);
    const int c = static_cast<int>(t.out_channels() != 0 ? t.out_channels() : t.channels());
    const int h = static_cast<int>(t.out_height() != 0 ? t.out_height() : t.height());
    const int w = static_cast<int>(t.out_width() != 0 ? t.out_width() : t.width());
    const int axes = static_cast<int>(t.sample_num_axes());
    if (axes > 3) {
      CORTADO_THROW(kInvalidArgument, "{}: top '{}': sample_num_axes is {}; at most 3", Describe(),
                    param_.top(i), axes);
    }
    std::vector<int> shape;
    if (t.transpose()) {
      if (axes != 1) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: top '{}': transpose needs sample_num_axes 1 (1-D samples), not {}",
                      Describe(), param_.top(i), axes);
      }
      shape = {c, b};
    } else {
      const std::vector<int> full = {b, c, h, w};
      shape.assign(full.begin(), full.begin() + 1 + axes);
    }
    for (int d : shape) {
      if (d <= 0) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: top '{}': every dimension must be positive, got shape {}", Describe(),
                      param_.top(i), fmt::join(shape, " "));
      }
    }
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

void FeedDataLayer::DataSetup(const std::vector<Tensor*>& top) {
  std::vector<std::vector<int>> shapes = TopShapes();
  std::vector<std::string> names(param_.top().begin(), param_.top().end());
  if (param_.has_transform_param()) {
    CORTADO_LOG_WARN("{}: transform_param is not applied; the feeder must push transformed values",
                     Describe());
  }
  if (!memory_data_) {
    for (int i = 0; i < param_.cos_data_param().top_size(); ++i) {
      if (param_.cos_data_param().top(i).has_transform_param()) {
        CORTADO_LOG_WARN(
            "{}: top '{}': transform_param is not applied; the feeder must push "
            "transformed values",
            Describe(), names[static_cast<size_t>(i)]);
      }
    }
  }
  for (size_t i = 0; i < top.size(); ++i) top[i]->Reshape(shapes[i]);
  feed_ =
      std::make_shared<BatchFeed>(Describe(), std::move(names), std::move(shapes), kFeedCapacity);
  FeedRegistry::Get().Register(this, ctx_, phase(), name(), feed_);
  CORTADO_LOG_DEBUG("{}: feed of {} batches ready", Describe(), kFeedCapacity);
}

void FeedDataLayer::LoadBatch(int64_t /*index*/, Rng* /*rng*/, DataBatch* batch) {
  feed_->Pop(batch);
}

CORTADO_REGISTER_LAYER(CoSData, FeedDataLayer);

}  // namespace cortado
