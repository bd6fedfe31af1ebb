// SPDX-License-Identifier: Apache-2.0
// Channel blocks on the CPU (net.hpp): the float32 blobs a net keeps in oneDNN's blocked layout
// between layers, so that a convolution's output reaches the BatchNorm after it, and that one's
// the next convolution, without being reordered to NCHW and back on each side.
#include <vector>

#include "core/logging.hpp"
#include "math/convolution.hpp"
#include "net/channels_last.hpp"
#include "net/net.hpp"

namespace cortado {

int Net::KeepBlockedTensors() {
  num_blocked_blobs_ = 0;
  if (!options_.cpu_blocks || ctx_->device().is_cuda()) return 0;
  const int block = math::CpuChannelBlock();
  if (block == 0) return 0;
  // Blobs that share a data buffer keep one layout.
  const std::vector<int> group_of_blob = DataBufferGroups(blobs_);
  // Blobs whose channels are a multiple of the block, and the others (a padded last block),
  // which only convolutions and pooling may take.
  std::vector<bool> may_be_blocked(blobs_.size()), may_be_padded(blobs_.size());
  for (size_t b = 0; b < blobs_.size(); ++b) {
    const Tensor& blob = *blobs_[b];
    const bool four_d = blob.home_type() == HalfType::kNone && blob.num_axes() == 4 &&
                        blob.shape(2) * blob.shape(3) > 1;
    may_be_blocked[b] = four_d && blob.shape(1) % block == 0;
    may_be_padded[b] = four_d && blob.shape(1) % block != 0;
  }
  // The net's outputs are read by whoever runs it (as NCHW views, but without a reorder).
  for (int blob : output_blob_indices_) may_be_blocked[blob] = may_be_padded[blob] = false;
  std::vector<bool> blocked =
      ChannelsLastBlobs(may_be_blocked, group_of_blob,
                        LayoutUsers(layers_, bottom_ids_, top_ids_, &Layer::BlockedTensors));
  const std::vector<bool> padded =
      ChannelsLastBlobs(may_be_padded, group_of_blob,
                        LayoutUsers(layers_, bottom_ids_, top_ids_, &Layer::PaddedBlockedTensors));
  for (size_t b = 0; b < blobs_.size(); ++b) blocked[b] = blocked[b] || padded[b];
  size_t bytes = 0;
  for (size_t b = 0; b < blobs_.size(); ++b) {
    if (!blocked[b]) continue;
    blobs_[b]->set_cpu_block(block);
    bytes += 2 * blobs_[b]->home_bytes();
    ++num_blocked_blobs_;
  }
  if (num_blocked_blobs_ > 0) {
    CORTADO_LOG_DEBUG(
        "net '{}': {} of {} blobs kept in blocks of {} channels between layers ({:.1f} MiB of "
        "activations and gradients)",
        name_, num_blocked_blobs_, blobs_.size(), block, bytes / 1048576.0);
  }
  return num_blocked_blobs_;
}

void Net::FlushBlockedTwins(const std::vector<Tensor*>& tensors) const {
  for (Tensor* t : tensors) {
    if (t->cpu_block() != 0) t->FlushTwins();
  }
}

}  // namespace cortado
