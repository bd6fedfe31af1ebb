// SPDX-License-Identifier: Apache-2.0
// Mixed precision (net.hpp): the blobs a net keeps in its 16-bit type between layers.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/logging.hpp"
#include "net/net.hpp"

namespace cortado {

int Net::KeepHalfTensors() {
  num_half_blobs_ = 0;
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
  // Blobs that share a data buffer (a Split's tops and its bottom, a Flatten's top and bottom)
  // keep one type: one group each.
  std::map<const SyncedMemory*, int> group_of_buffer;
  std::vector<int> group_of_blob;
  for (const auto& blob : blobs_) {
    group_of_blob.push_back(
        group_of_buffer.emplace(blob->data().get(), static_cast<int>(group_of_buffer.size()))
            .first->second);
  }
  std::vector<bool> half(group_of_buffer.size(), true);
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
  if (num_half_blobs_ > 0) {
    CORTADO_LOG_INFO(
        "net '{}': {} of {} blobs kept in {} between layers ({:.1f} of {:.1f} MiB of activations "
        "and gradients at float32)",
        name_, num_half_blobs_, blobs_.size(), HalfTypeName(type), half_bytes / 1048576.0,
        float_bytes / 1048576.0);
  }
  return num_half_blobs_;
}

}  // namespace cortado
