// SPDX-License-Identifier: Apache-2.0
#include "net/insert_splits.hpp"

#include <map>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace cortado {
namespace {

using TopIndex = std::pair<int, int>;  // (layer, top)

std::string SplitLayerName(const std::string& layer, const std::string& blob, int top) {
  return fmt::format("{}_{}_{}_split", blob, layer, top);
}

std::string SplitBlobName(const std::string& layer, const std::string& blob, int top, int k) {
  return fmt::format("{}_{}_{}_split_{}", blob, layer, top, k);
}

}  // namespace

caffe::NetParameter InsertSplits(const caffe::NetParameter& param) {
  std::map<std::string, TopIndex> last_top;
  std::map<TopIndex, TopIndex> bottom_source;
  std::map<TopIndex, int> consumers;
  std::map<TopIndex, float> loss_weights;
  for (int i = 0; i < param.layer_size(); ++i) {
    const caffe::LayerParameter& layer = param.layer(i);
    for (int j = 0; j < layer.bottom_size(); ++j) {
      auto it = last_top.find(layer.bottom(j));
      if (it == last_top.end()) {
        CORTADO_THROW(kInvalidArgument,
                      "layer '{}' ({}): bottom '{}' (bottom index {}) is not produced by any "
                      "earlier layer",
                      layer.name(), layer.type(), layer.bottom(j), j);
      }
      bottom_source[{i, j}] = it->second;
      ++consumers[it->second];
    }
    for (int j = 0; j < layer.top_size(); ++j) last_top[layer.top(j)] = {i, j};
    // An explicit loss weight on a consumed top is one more consumer: the loss.
    if (layer.loss_weight_size() == layer.top_size()) {
      for (int j = 0; j < layer.loss_weight_size(); ++j) {
        if (layer.loss_weight(j) == 0.0f) continue;
        loss_weights[{i, j}] = layer.loss_weight(j);
        ++consumers[{i, j}];
      }
    }
  }

  caffe::NetParameter out = param;
  out.clear_layer();
  std::map<TopIndex, int> next_split;
  for (int i = 0; i < param.layer_size(); ++i) {
    caffe::LayerParameter* layer = out.add_layer();
    layer->CopyFrom(param.layer(i));
    for (int j = 0; j < layer->bottom_size(); ++j) {
      const TopIndex source = bottom_source[{i, j}];
      if (consumers[source] > 1) {
        const std::string& source_layer = param.layer(source.first).name();
        layer->set_bottom(
            j, SplitBlobName(source_layer, layer->bottom(j), source.second, next_split[source]++));
      }
    }
    for (int j = 0; j < layer->top_size(); ++j) {
      const TopIndex top{i, j};
      const int count = consumers[top];
      if (count <= 1) continue;
      const std::string blob = layer->top(j);
      const float loss_weight = loss_weights.count(top) ? loss_weights[top] : 0.0f;
      caffe::LayerParameter* split = out.add_layer();
      split->set_name(SplitLayerName(layer->name(), blob, j));
      split->set_type("Split");
      split->add_bottom(blob);
      for (int k = 0; k < count; ++k) {
        split->add_top(SplitBlobName(layer->name(), blob, j, k));
        if (loss_weight != 0.0f) split->add_loss_weight(k == 0 ? loss_weight : 0.0f);
      }
      if (loss_weight != 0.0f) {
        // The loss moves to the split's first top; the original top keeps weight 0.
        layer->set_loss_weight(j, 0.0f);
        ++next_split[top];
      }
    }
  }
  return out;
}

}  // namespace cortado
