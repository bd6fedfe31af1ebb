// SPDX-License-Identifier: Apache-2.0
#include "parallel/session_info.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "data/batch_feed.hpp"
#include "data/feed_data_layer.hpp"
#include "layers/layer.hpp"
#include "net/net.hpp"

namespace cortado {
namespace {

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string SourceOf(const caffe::LayerParameter& layer) {
  if (layer.has_cos_data_param()) return layer.cos_data_param().source();
  if (layer.has_memory_data_param() && layer.memory_data_param().has_source()) {
    return layer.memory_data_param().source();
  }
  if (layer.has_data_param()) return layer.data_param().source();
  if (layer.has_image_data_param()) return layer.image_data_param().source();
  if (layer.has_hdf5_data_param()) return layer.hdf5_data_param().source();
  return "";
}

}  // namespace

void CheckLayerTypes(const caffe::NetParameter& net, const std::string& source) {
  const LayerRegistry& registry = LayerRegistry::Get();
  for (const auto& layer : net.layer()) {
    if (!registry.Has(layer.type())) {
      CORTADO_THROW(kInvalidArgument, "{}: layer '{}': unknown layer type '{}' (known: {})", source,
                    layer.name(), layer.type(), fmt::join(registry.Types(), ", "));
    }
  }
}

caffe::NetParameter NetForPhase(const caffe::NetParameter& param, caffe::Phase phase) {
  caffe::NetParameter p = param;
  p.mutable_state()->set_phase(phase);
  return Net::FilterNet(p);
}

caffe::NetParameter WithFeedBatchSize(const caffe::NetParameter& param, caffe::Phase phase,
                                      const std::string& layer, int batch,
                                      const std::string& source) {
  if (batch < 1) {
    CORTADO_THROW(kInvalidArgument, "{}: layer '{}': a batch size must be positive, not {}", source,
                  layer, batch);
  }
  caffe::NetState state = param.state();
  state.set_phase(phase);
  const auto in_phase = [&state](const caffe::LayerParameter& l) {
    if (l.include_size() > 0) {
      for (const auto& rule : l.include()) {
        if (Net::StateMeetsRule(state, rule)) return true;
      }
      return false;
    }
    for (const auto& rule : l.exclude()) {
      if (Net::StateMeetsRule(state, rule)) return false;
    }
    return true;
  };
  caffe::NetParameter result = param;
  int changed = 0;
  for (caffe::LayerParameter& l : *result.mutable_layer()) {
    if (l.name() != layer || !in_phase(l) || !FeedDataLayer::IsFeedLayer(l)) continue;
    if (l.type() == "MemoryData") {
      l.mutable_memory_data_param()->set_batch_size(static_cast<uint32_t>(batch));
    } else {
      l.mutable_cos_data_param()->set_batch_size(static_cast<uint32_t>(batch));
    }
    ++changed;
  }
  if (changed == 0) {
    CORTADO_THROW(kNotFound, "{}: the {} net has no feed layer '{}'", source,
                  phase == caffe::TRAIN ? "TRAIN" : "TEST", layer);
  }
  return result;
}

std::vector<DataLayerInfo> DescribeDataLayers(const caffe::NetParameter& phase_net,
                                              const std::string& source) {
  std::vector<DataLayerInfo> layers;
  for (const caffe::LayerParameter& layer : phase_net.layer()) {
    if (!EndsWith(layer.type(), "Data")) continue;
    DataLayerInfo info;
    info.name = layer.name();
    info.type = layer.type();
    info.source_class = layer.source_class();
    info.feed = FeedDataLayer::IsFeedLayer(layer);
    info.source = SourceOf(layer);
    if (layer.has_cos_data_param() && layer.cos_data_param().has_dataframe_format()) {
      info.dataframe_format = layer.cos_data_param().dataframe_format();
    }
    if (layer.has_memory_data_param()) {
      const caffe::MemoryDataParameter& memory = layer.memory_data_param();
      if (memory.has_dataframe_format()) info.dataframe_format = memory.dataframe_format();
      info.column_select.assign(memory.dataframe_column_select().begin(),
                                memory.dataframe_column_select().end());
      info.image_encoded = memory.image_encoded();
    }
    if (layer.has_transform_param())
      info.crop_size = static_cast<int>(layer.transform_param().crop_size());
    const bool cos = layer.type() == "CoSData";
    for (int i = 0; i < layer.top_size(); ++i) {
      info.tops.push_back(layer.top(i));
      const bool described = cos && i < layer.cos_data_param().top_size();
      const auto* top = described ? &layer.cos_data_param().top(i) : nullptr;
      info.columns.push_back(top != nullptr && top->has_name() ? top->name() : layer.top(i));
      info.top_types.push_back(top != nullptr ? caffe::CoSDataParameter::DataType_Name(top->type())
                                              : "");
      info.transposed.push_back(top != nullptr && top->transpose());
    }
    if (info.feed) {
      const std::string owner =
          fmt::format("{}: layer '{}' ({})", source, layer.name(), layer.type());
      for (const std::vector<int>& shape : FeedDataLayer::FeedShapesOf(layer, owner)) {
        // The batch axis is first, or last for a transposed top.
        const bool transposed = info.sample_shapes.size() < info.transposed.size() &&
                                info.transposed[info.sample_shapes.size()];
        if (transposed) {
          info.sample_shapes.push_back({shape.front()});
          info.batch_size = shape.back();
        } else {
          info.sample_shapes.emplace_back(shape.begin() + 1, shape.end());
          info.batch_size = shape.front();
        }
      }
    }
    layers.push_back(std::move(info));
  }
  return layers;
}

std::vector<std::string> OutputBlobNames(const caffe::NetParameter& phase_net) {
  // Available tops, in the order they were last produced: a bottom consumes one, a top adds it
  // (again, for an in-place layer).
  std::vector<std::string> available;
  for (const caffe::LayerParameter& layer : phase_net.layer()) {
    for (const std::string& bottom : layer.bottom()) {
      available.erase(std::remove(available.begin(), available.end(), bottom), available.end());
    }
    for (const std::string& top : layer.top()) {
      available.erase(std::remove(available.begin(), available.end(), top), available.end());
      available.push_back(top);
    }
  }
  return available;
}

std::vector<std::string> BlobNames(const caffe::NetParameter& phase_net) {
  std::vector<std::string> names;
  for (const std::string& input : phase_net.input()) names.push_back(input);
  for (const caffe::LayerParameter& layer : phase_net.layer()) {
    for (const std::string& top : layer.top()) {
      if (std::find(names.begin(), names.end(), top) == names.end()) names.push_back(top);
    }
  }
  return names;
}

void AppendFeeds(const Net& net, std::vector<NamedFeed>* feeds) {
  const std::string phase = net.phase() == caffe::TRAIN ? "TRAIN/" : "TEST/";
  for (size_t i = 0; i < net.layers().size(); ++i) {
    if (auto feed = FeedOf(*net.layers()[i]))
      feeds->emplace_back(phase + net.layer_names()[i], feed);
  }
}

std::vector<std::string> FeedNames(const std::vector<NamedFeed>& feeds) {
  std::vector<std::string> names;
  for (const auto& entry : feeds) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

std::shared_ptr<BatchFeed> FindFeed(const std::vector<NamedFeed>& feeds, const std::string& layer,
                                    const std::string& owner) {
  const size_t slash = layer.find('/');
  const std::string phase = slash == std::string::npos ? "" : layer.substr(0, slash);
  const std::string name = slash == std::string::npos ? layer : layer.substr(slash + 1);
  for (const char* wanted : {"TRAIN", "TEST"}) {
    if (!phase.empty() && phase != wanted) continue;
    for (const auto& [qualified, feed] : feeds) {
      if (qualified == std::string(wanted) + "/" + name) return feed;
    }
  }
  CORTADO_THROW(kNotFound, "{} has no feed layer '{}' (its feed layers: {})", owner, layer,
                fmt::join(FeedNames(feeds), ", "));
}

}  // namespace cortado
