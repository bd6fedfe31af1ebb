// SPDX-License-Identifier: Apache-2.0
// Mixed precision (net.hpp): the blobs a net keeps in its 16-bit type between layers.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/logging.hpp"
#include "net/channels_last.hpp"
#include "net/net.hpp"

namespace cortado {

std::vector<bool> ChannelsLastBlobs(const std::vector<bool>& may_be_nhwc,
                                    const std::vector<int>& group_of_blob,
                                    const std::vector<LayoutUser>& layers) {
  const int num_blobs = static_cast<int>(may_be_nhwc.size());
  std::vector<int> parent(num_blobs);
  std::iota(parent.begin(), parent.end(), 0);
  auto root = [&](int b) {
    while (parent[b] != b) b = parent[b] = parent[parent[b]];
    return b;
  };
  auto join = [&](int a, int b) { parent[root(a)] = root(b); };
  std::map<int, int> first_of_group;
  for (int b = 0; b < num_blobs; ++b) {
    const auto [it, fresh] = first_of_group.emplace(group_of_blob[b], b);
    if (!fresh) join(b, it->second);
  }
  for (const LayoutUser& layer : layers) {
    if (layer.use != Layer::NhwcUse::kSame) continue;
    for (size_t i = 1; i < layer.blobs.size(); ++i) join(layer.blobs[i], layer.blobs[0]);
  }
  std::vector<bool> allowed(num_blobs, true), wanted(num_blobs, false);
  for (int b = 0; b < num_blobs; ++b) {
    if (!may_be_nhwc[b]) allowed[root(b)] = false;
  }
  for (const LayoutUser& layer : layers) {
    for (int b : layer.blobs) {
      if (layer.use == Layer::NhwcUse::kNo) allowed[root(b)] = false;
      if (layer.convolution) wanted[root(b)] = true;
    }
  }
  std::vector<bool> nhwc(num_blobs);
  for (int b = 0; b < num_blobs; ++b) nhwc[b] = allowed[root(b)] && wanted[root(b)];
  return nhwc;
}

std::vector<int> DataBufferGroups(const std::vector<std::shared_ptr<Tensor>>& blobs) {
  std::map<const SyncedMemory*, int> group_of_buffer;
  std::vector<int> group_of_blob;
  for (const auto& blob : blobs) {
    group_of_blob.push_back(
        group_of_buffer.emplace(blob->data().get(), static_cast<int>(group_of_buffer.size()))
            .first->second);
  }
  return group_of_blob;
}

std::vector<LayoutUser> LayoutUsers(const std::vector<std::unique_ptr<Layer>>& layers,
                                    const std::vector<std::vector<int>>& bottom_ids,
                                    const std::vector<std::vector<int>>& top_ids,
                                    Layer::NhwcUse (Layer::*use_of)() const) {
  std::vector<LayoutUser> users(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = *layers[i];
    users[i].use = layer.fused_into() != nullptr ? Layer::NhwcUse::kSame : (layer.*use_of)();
    users[i].convolution =
        std::strcmp(layer.type(), "Convolution") == 0 && users[i].use == Layer::NhwcUse::kEach;
    users[i].blobs = bottom_ids[i];
    users[i].blobs.insert(users[i].blobs.end(), top_ids[i].begin(), top_ids[i].end());
  }
  return users;
}

namespace {

// CORTADO_NHWC_BLOBS=0 keeps every 16-bit blob NCHW (convolutions then transpose per shape, as
// CORTADO_HALF_CONV_LAYOUT says); so does CORTADO_HALF_CONV_LAYOUT=nchw.
bool ChannelsLastWanted() {
  const char* blobs = std::getenv("CORTADO_NHWC_BLOBS");
  if (blobs != nullptr && std::strcmp(blobs, "0") == 0) return false;
  const char* conv = std::getenv("CORTADO_HALF_CONV_LAYOUT");
  return conv == nullptr || std::strcmp(conv, "nchw") != 0;
}

}  // namespace

int Net::KeepHalfTensors() {
  num_half_blobs_ = 0;
  num_nhwc_blobs_ = 0;
  const int num_layers = static_cast<int>(layers_.size());
  // A fused layer's passes are its host's, so it neither reads nor writes anything itself.
  HalfType type = HalfType::kNone;
  std::vector<bool> takes(num_layers);
  for (int i = 0; i < num_layers; ++i) {
    const HalfType layer_type = layers_[i]->HalfTensors();
    takes[i] = layers_[i]->fused_into() != nullptr || layer_type != HalfType::kNone;
    if (layer_type != HalfType::kNone) type = layer_type;
  }
  if (type == HalfType::kNone) return 0;
  // Blobs that share a data buffer keep one type: one group each.
  const std::vector<int> group_of_blob = DataBufferGroups(blobs_);
  const int num_groups =
      group_of_blob.empty() ? 0 : *std::max_element(group_of_blob.begin(), group_of_blob.end()) + 1;
  std::vector<bool> half(num_groups, true);
  for (int i = 0; i < num_layers; ++i) {
    if (takes[i]) continue;
    for (int blob : bottom_ids_[i]) half[group_of_blob[blob]] = false;
    for (int blob : top_ids_[i]) half[group_of_blob[blob]] = false;
  }
  // The net's outputs are read as float32 by whoever runs it.
  for (int blob : output_blob_indices_) half[group_of_blob[blob]] = false;
  size_t float_bytes = 0, half_bytes = 0;
  // New buffers of two bytes per value, shared as the old ones were (a Split's tops take their
  // bottom's data but have gradients of their own; a Flatten shares both).
  std::map<const SyncedMemory*, std::shared_ptr<SyncedMemory>> data_buffers, diff_buffers;
  auto resized = [](std::map<const SyncedMemory*, std::shared_ptr<SyncedMemory>>& buffers,
                    const std::shared_ptr<SyncedMemory>& old, size_t bytes) {
    std::shared_ptr<SyncedMemory>& buffer = buffers[old.get()];
    if (buffer == nullptr || buffer->size() < bytes) buffer = std::make_shared<SyncedMemory>(bytes);
  };
  for (size_t b = 0; b < blobs_.size(); ++b) {
    const size_t bytes = 2 * sizeof(float) * static_cast<size_t>(blobs_[b]->count());
    float_bytes += bytes;
    if (!half[group_of_blob[b]]) continue;
    const size_t half_values = ValueBytes(type) * static_cast<size_t>(blobs_[b]->count());
    resized(data_buffers, blobs_[b]->data(), half_values);
    resized(diff_buffers, blobs_[b]->diff(), half_values);
    half_bytes += bytes;
    ++num_half_blobs_;
  }
  for (size_t b = 0; b < blobs_.size(); ++b) {
    if (!half[group_of_blob[b]]) continue;
    Tensor& blob = *blobs_[b];
    const std::shared_ptr<SyncedMemory> data = data_buffers.at(blob.data().get());
    const std::shared_ptr<SyncedMemory> diff = diff_buffers.at(blob.diff().get());
    blob.set_home_type(type);
    blob.UseDataBuffer(data);
    blob.UseDiffBuffer(diff);
  }
  // Channels-last sets among them.
  int num_nhwc = 0;
  if (num_half_blobs_ > 0 && ChannelsLastWanted()) {
    std::vector<bool> may_be_nhwc(blobs_.size());
    for (size_t b = 0; b < blobs_.size(); ++b) {
      const Tensor& blob = *blobs_[b];
      may_be_nhwc[b] = half[group_of_blob[b]] && blob.num_axes() == 4 &&
                       blob.shape(2) * blob.shape(3) > 1 && blob.shape(1) > 1;
    }
    const std::vector<bool> nhwc =
        ChannelsLastBlobs(may_be_nhwc, group_of_blob,
                          LayoutUsers(layers_, bottom_ids_, top_ids_, &Layer::NhwcTensors));
    for (size_t b = 0; b < blobs_.size(); ++b) {
      if (!nhwc[b]) continue;
      blobs_[b]->set_home_nhwc(true);
      ++num_nhwc;
    }
  }
  num_nhwc_blobs_ = num_nhwc;
  if (num_half_blobs_ > 0) {
    CORTADO_LOG_INFO(
        "net '{}': {} of {} blobs kept in {} between layers ({:.1f} of {:.1f} MiB of activations "
        "and gradients at float32)",
        name_, num_half_blobs_, blobs_.size(), HalfTypeName(type), half_bytes / 1048576.0,
        float_bytes / 1048576.0);
    if (num_nhwc > 0) {
      CORTADO_LOG_INFO("net '{}': {} of them kept channels-last (NHWC)", name_, num_nhwc);
    }
  }
  return num_half_blobs_;
}

}  // namespace cortado
