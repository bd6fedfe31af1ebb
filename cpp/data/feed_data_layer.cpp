// SPDX-License-Identifier: Apache-2.0
#include "data/feed_data_layer.hpp"

#include "core/logging.hpp"

namespace cortado {

FeedDataLayer::FeedDataLayer(const caffe::LayerParameter& param, Context* ctx)
    : BasePrefetchingDataLayer(param, ctx), memory_data_(param.type() == "MemoryData") {}

FeedDataLayer::~FeedDataLayer() {
  // Wakes the prefetch thread (blocked in Pop) and any blocked pusher before the join.
  if (feed_) feed_->Abort(Describe() + " was destroyed");
  StopPrefetch();
}

bool FeedDataLayer::IsFeedLayer(const caffe::LayerParameter& param) {
  return param.type() == "CoSData" || (param.type() == "MemoryData" && param.has_source_class());
}

std::vector<std::vector<int>> FeedDataLayer::FeedShapes() const {
  return FeedShapesOf(param_, Describe());
}

std::vector<std::vector<int>> FeedDataLayer::FeedShapesOf(const caffe::LayerParameter& param,
                                                          const std::string& owner) {
  std::vector<std::vector<int>> shapes;
  if (param.type() == "MemoryData") {
    const auto& p = param.memory_data_param();
    if (p.batch_size() == 0 || p.channels() == 0 || p.height() == 0 || p.width() == 0) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: memory_data_param batch_size, channels, height and width must all be "
                    "positive, got {}, {}, {}, {}",
                    owner, p.batch_size(), p.channels(), p.height(), p.width());
    }
    const int b = static_cast<int>(p.batch_size());
    shapes.push_back({b, static_cast<int>(p.channels()), static_cast<int>(p.height()),
                      static_cast<int>(p.width())});
    shapes.push_back({b});
    return shapes;
  }
  const auto& p = param.cos_data_param();
  if (!param.has_cos_data_param() || p.batch_size() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: cos_data_param.batch_size must be positive", owner);
  }
  if (p.top_size() != param.top_size()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the layer has {} tops but cos_data_param describes {}; they must match",
                  owner, param.top_size(), p.top_size());
  }
  const int b = static_cast<int>(p.batch_size());
  for (int i = 0; i < p.top_size(); ++i) {
    const auto& t = p.top(i);
    const int c = static_cast<int>(t.out_channels() != 0 ? t.out_channels() : t.channels());
    const int h = static_cast<int>(t.out_height() != 0 ? t.out_height() : t.height());
    const int w = static_cast<int>(t.out_width() != 0 ? t.out_width() : t.width());
    const int axes = static_cast<int>(t.sample_num_axes());
    if (axes > 3) {
      CORTADO_THROW(kInvalidArgument, "{}: top '{}': sample_num_axes is {}; at most 3", owner,
                    param.top(i), axes);
    }
    std::vector<int> shape;
    if (t.transpose()) {
      if (axes != 1) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: top '{}': transpose needs sample_num_axes 1 (1-D samples), not {}",
                      owner, param.top(i), axes);
      }
      shape = {c, b};
    } else {
      const std::vector<int> full = {b, c, h, w};
      shape.assign(full.begin(), full.begin() + 1 + axes);
    }
    for (int d : shape) {
      if (d <= 0) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: top '{}': every dimension must be positive, got shape {}", owner,
                      param.top(i), fmt::join(shape, " "));
      }
    }
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

const caffe::TransformationParameter* FeedDataLayer::TransformOf(int top) const {
  if (memory_data_)
    return top == 0 && param_.has_transform_param() ? &param_.transform_param() : nullptr;
  const auto& t = param_.cos_data_param().top(top);
  return t.has_transform_param() ? &t.transform_param() : nullptr;
}

void FeedDataLayer::DataSetup(const std::vector<Tensor*>& top) {
  std::vector<std::vector<int>> shapes = FeedShapes();
  std::vector<std::string> names(param_.top().begin(), param_.top().end());
  if (!memory_data_ && param_.has_transform_param()) {
    CORTADO_LOG_WARN(
        "{}: the layer's transform_param is not used; a CoSData layer takes transform_param "
        "per cos_data_param top",
        Describe());
  }
  transformers_.clear();
  sample_chw_.clear();
  top_shapes_ = shapes;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const caffe::TransformationParameter* transform = TransformOf(static_cast<int>(i));
    const std::string owner = fmt::format("{}: top '{}'", Describe(), names[i]);
    std::array<int, 3> chw = {1, 1, 1};
    const std::vector<int>& shape = shapes[i];
    for (size_t a = 1; a < shape.size(); ++a) chw[a - 1] = shape[a];
    if (transform != nullptr && !memory_data_ &&
        param_.cos_data_param().top(static_cast<int>(i)).transpose()) {
      CORTADO_THROW(kInvalidArgument, "{}: a transposed top takes no transform_param", owner);
    }
    std::unique_ptr<DataTransformer> transformer;
    if (transform != nullptr) {
      transformer = std::make_unique<DataTransformer>(*transform, phase(), owner);
      const std::vector<int> out = transformer->InferShape(chw[0], chw[1], chw[2]);
      if (shape.size() == 4) top_shapes_[i] = {shape[0], out[0], out[1], out[2]};
    }
    transformers_.push_back(std::move(transformer));
    sample_chw_.push_back(chw);
  }
  for (size_t i = 0; i < top.size(); ++i) top[i]->Reshape(top_shapes_[i]);
  feed_ =
      std::make_shared<BatchFeed>(Describe(), std::move(names), std::move(shapes), kFeedCapacity);
  CORTADO_LOG_DEBUG("{}: feed of {} batches ready", Describe(), kFeedCapacity);
}

void FeedDataLayer::LoadBatch(int64_t /*index*/, Rng* rng, DataBatch* batch) {
  DataBatch pushed;
  feed_->Pop(&pushed);
  batch->shapes = top_shapes_;
  batch->tops.resize(pushed.tops.size());
  for (size_t i = 0; i < pushed.tops.size(); ++i) {
    const DataTransformer* transformer = transformers_[i].get();
    if (transformer == nullptr) {
      batch->tops[i].swap(pushed.tops[i]);
      continue;
    }
    const auto [c, h, w] = sample_chw_[i];
    const std::vector<int>& shape = top_shapes_[i];
    const int samples = shape[0];
    const size_t in_size = static_cast<size_t>(c) * h * w;
    size_t out_size = 1;
    for (size_t a = 1; a < shape.size(); ++a) out_size *= static_cast<size_t>(shape[a]);
    std::vector<float>& out = batch->tops[i];
    out.resize(out_size * static_cast<size_t>(samples));
    for (int s = 0; s < samples; ++s) {
      transformer->Transform(pushed.tops[i].data() + in_size * static_cast<size_t>(s), c, h, w,
                             out.data() + out_size * static_cast<size_t>(s), rng);
    }
  }
}

CORTADO_REGISTER_LAYER(CoSData, FeedDataLayer);

std::shared_ptr<BatchFeed> FeedOf(const Layer& layer) {
  const auto* feed_layer = dynamic_cast<const FeedDataLayer*>(&layer);
  return feed_layer != nullptr ? feed_layer->feed() : nullptr;
}

}  // namespace cortado
