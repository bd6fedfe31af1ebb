// SPDX-License-Identifier: Apache-2.0
// The memory layout of a Net (net.hpp): the training memory plan (ShareDiffBuffers,
// ShareDataBuffers) and the learnable parameters' gradients in one buffer (flat_diff).
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "core/logging.hpp"
#include "net/net.hpp"

namespace cortado {
namespace {

// Blobs that already share one buffer (a Split's tops share their bottom's data; Flatten,
// Reshape and the like alias their top's data and diff to their bottom's) are planned as one
// group. `buffer_of` picks the data or the diff buffer.
struct BufferGroups {
  std::vector<int> of_blob;                   // group of each blob
  std::vector<std::vector<Tensor*>> tensors;  // blobs of each group
  std::vector<size_t> bytes;                  // the largest blob of each group
};

template <typename BufferOf>
BufferGroups GroupBlobs(const std::vector<std::shared_ptr<Tensor>>& blobs, BufferOf buffer_of) {
  BufferGroups groups;
  std::map<const SyncedMemory*, int> group_of_buffer;
  for (const auto& blob : blobs) {
    const auto [it, added] =
        group_of_buffer.emplace(buffer_of(*blob), static_cast<int>(groups.tensors.size()));
    if (added) {
      groups.tensors.emplace_back();
      groups.bytes.push_back(0);
    }
    groups.of_blob.push_back(it->second);
    groups.tensors[it->second].push_back(blob.get());
    groups.bytes[it->second] = std::max(groups.bytes[it->second], blob->home_bytes());
  }
  return groups;
}

// Which layers of a pass touch each group's buffer: the first and last (layer indices, in the
// pass's order) and whether every touch by the first one only writes it.
struct Touches {
  explicit Touches(int num_groups)
      : first(num_groups, -1), last(num_groups, -1), first_writes(num_groups, false) {}
  void Touch(int group, int layer, bool writes) {
    if (first[group] < 0) {
      first[group] = layer;
      first_writes[group] = writes;
    } else if (first[group] == layer) {
      first_writes[group] = first_writes[group] && writes;
    }
    last[group] = layer;
  }
  std::vector<int> first, last;
  std::vector<bool> first_writes;
};

// A group's use of a buffer: from step `start` to step `end` (inclusive) of a pass (or of
// Forward followed by Backward), by the blobs `tensors`, the largest of which needs `bytes`, as
// their data or as their diff (`use`). An `alone` group gets a buffer of its own size, which
// later groups may reuse but not grow.
struct Lifetime {
  int start;
  int end;
  size_t bytes;
  const std::vector<Tensor*>* tensors;
  void (Tensor::*use)(std::shared_ptr<SyncedMemory>);  // nullptr: only `record` it
  bool alone = false;
  // Where to keep the buffer as well (a recomputed blob's two buffers), and whether its bytes
  // count among the "separate" ones (a recomputed blob's second lifetime does not: without the
  // plan it has one buffer).
  std::shared_ptr<SyncedMemory>* record = nullptr;
  bool counted = true;
};

// Packs lifetimes into as few bytes of buffers as a greedy pass finds: in order of start, each
// takes a buffer whose last user ended strictly before it starts (two groups never meet in one
// layer's step), the smallest that fits, else the largest free one that may grow, grown, else a
// new one. An `alone` lifetime takes a new buffer at once, which never grows.
// Gives each lifetime's blobs their buffer and returns the bytes saved; `what` ("gradients")
// names them in the debug log of net `net`.
size_t PackBuffers(std::vector<Lifetime> lifetimes, const std::string& net, const char* what) {
  std::stable_sort(lifetimes.begin(), lifetimes.end(),
                   [](const Lifetime& a, const Lifetime& b) { return a.start < b.start; });
  struct Buffer {
    size_t bytes = 0;
    int busy_until = 0;
    bool growable = true;
    std::vector<const Lifetime*> users;
  };
  std::vector<Buffer> buffers;
  size_t separate = 0;
  for (const Lifetime& life : lifetimes) {
    const size_t bytes = life.bytes;
    if (life.counted) separate += bytes;
    Buffer* best = nullptr;
    for (Buffer& buffer : buffers) {
      if (life.alone || buffer.busy_until >= life.start) continue;
      const bool fits = buffer.bytes >= bytes;
      if (!fits && !buffer.growable) continue;
      if (best == nullptr || (fits && (best->bytes < bytes || buffer.bytes < best->bytes)) ||
          (!fits && best->bytes < bytes && buffer.bytes > best->bytes)) {
        best = &buffer;
      }
    }
    if (best == nullptr) {
      buffers.emplace_back();
      best = &buffers.back();
      best->growable = !life.alone;
    }
    best->bytes = std::max(best->bytes, bytes);
    best->busy_until = life.end;
    best->users.push_back(&life);
  }
  size_t shared = 0;
  for (const Buffer& buffer : buffers) {
    auto memory = std::make_shared<SyncedMemory>(buffer.bytes);
    for (const Lifetime* life : buffer.users) {
      if (life->use != nullptr) {
        for (Tensor* t : *life->tensors) (t->*life->use)(memory);
      }
      if (life->record != nullptr) *life->record = memory;
    }
    shared += buffer.bytes;
  }
  CORTADO_LOG_DEBUG("net '{}': {} blobs' {} in {} MiB instead of {} MiB", net, lifetimes.size(),
                    what, shared >> 20, separate >> 20);
  return separate - shared;
}

}  // namespace

std::vector<bool> Net::BlobsOutsideThePlan(const std::vector<int>& group_of_blob,
                                           int num_groups) const {
  // The net's inputs and outputs (what callers read and write), losses (their diffs hold the
  // loss weights) and the tops of layers without bottoms (data layers, filled from outside).
  std::vector<bool> excluded(num_groups, false);
  const std::set<const Tensor*> inputs(input_blobs_.begin(), input_blobs_.end());
  for (size_t blob = 0; blob < blobs_.size(); ++blob) {
    if (inputs.count(blobs_[blob].get()) || blobs_[blob]->count() == 0 ||
        (blob < blob_loss_weights_.size() && blob_loss_weights_[blob] != 0.0f)) {
      excluded[group_of_blob[blob]] = true;
    }
  }
  for (int blob : output_blob_indices_) excluded[group_of_blob[blob]] = true;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (bottom_ids_[i].empty()) {
      for (int blob : top_ids_[i]) excluded[group_of_blob[blob]] = true;
    }
  }
  return excluded;
}

// The groups a plan is made of (kept alive until its buffers are handed out) and their
// lifetimes.
struct Net::BufferPlan {
  std::vector<std::unique_ptr<BufferGroups>> groups;
  std::vector<Lifetime> lifetimes;
  std::vector<std::unique_ptr<Recomputed>> recomputed;
};

void Net::PlanDiffs(BufferPlan* plan, int offset) const {
  const int num_layers = static_cast<int>(layers_.size());
  plan->groups.push_back(std::make_unique<BufferGroups>(
      GroupBlobs(blobs_, [](const Tensor& t) { return t.diff().get(); })));
  const BufferGroups& groups = *plan->groups.back();
  const int num_groups = static_cast<int>(groups.tensors.size());
  // For each group, the highest and lowest index of the backward-running layers that touch its
  // diff (as a top, or as a bottom), and whether all touches at the highest one overwrite it
  // without reading it (a bottom it propagates to, and not one of its tops). A fused layer touches
  // nothing itself: the layer it is fused into touches its blobs for it (its own bottoms and tops
  // are those of its followers in place, or, a sum folded into a BatchNorm, the sum's). A Split
  // folded into the sum below it (FoldSplitsIntoSums) counts its touches at its own index,
  // although the sum reads its top diffs: the layers between the two are fused into the sum's
  // host and touch nothing, so the only gradients born in between are the host's bottoms', which
  // its Backward writes either element by element after reading the same element of the top
  // diffs (the sum's pass), or in a later pass (a BatchNorm's, after the sum's). They may
  // therefore take the top diffs' buffers, which keeps the fold from raising the plan's peak.
  Touches touches(num_groups);
  for (int i = num_layers - 1; i >= 0; --i) {
    if (!layer_need_backward_[i]) continue;
    const bool fused = layers_[i]->fused_into() != nullptr;
    if (fused && std::strcmp(layers_[i]->type(), "Split") != 0) continue;
    const auto& tops = top_ids_[i];
    for (int blob : tops) touches.Touch(groups.of_blob[blob], i, false);
    for (size_t b = 0; b < bottom_ids_[i].size(); ++b) {
      const int blob = bottom_ids_[i][b];
      const bool in_place = std::find(tops.begin(), tops.end(), blob) != tops.end();
      touches.Touch(groups.of_blob[blob], i, !fused && bottom_need_backward_[i][b] && !in_place);
    }
  }
  const std::vector<int>& first = touches.first;
  const std::vector<int>& last = touches.last;
  const std::vector<bool> excluded = BlobsOutsideThePlan(groups.of_blob, num_groups);
  // Backward runs from the last layer down: its step for layer i is offset + num_layers - 1 - i.
  for (int g = 0; g < num_groups; ++g) {
    if (first[g] >= 0 && touches.first_writes[g] && last[g] < first[g] && !excluded[g]) {
      plan->lifetimes.push_back({offset + num_layers - 1 - first[g],
                                 offset + num_layers - 1 - last[g], groups.bytes[g],
                                 &groups.tensors[g], &Tensor::UseDiffBuffer});
    }
  }
}

void Net::PlanData(BufferPlan* plan, const std::vector<std::string>& keep, bool through_backward,
                   int offset) const {
  const int num_layers = static_cast<int>(layers_.size());
  plan->groups.push_back(std::make_unique<BufferGroups>(
      GroupBlobs(blobs_, [](const Tensor& t) { return t.data().get(); })));
  const BufferGroups& groups = *plan->groups.back();
  const int num_groups = static_cast<int>(groups.tensors.size());
  // For each group: the first and last layer whose Forward touches its data, whether the first
  // one only writes it (a top, not also a bottom), and the lowest index of a layer whose
  // Backward reads it (-1: none), the last to read it, since Backward runs from the last layer
  // down. Fused layers do nothing themselves and are skipped: the layer they are fused into
  // reads for them.
  // Also, for recomputing: the last layer that writes each group as a top, and the highest index
  // of a layer whose Backward reads it (the first reader in Backward).
  Touches touches(num_groups);
  std::vector<int> last_backward_reader(num_groups, -1);
  std::vector<int> first_backward_reader(num_groups, -1);
  std::vector<int> last_writer(num_groups, -1);
  for (int i = 0; i < num_layers; ++i) {
    const Layer& layer = *layers_[i];
    if (layer.fused_into() != nullptr) continue;
    auto touch = [&](int g, bool writes, bool read_by_backward) {
      touches.Touch(g, i, writes);
      if (layer_need_backward_[i] && read_by_backward) {
        if (last_backward_reader[g] < 0) last_backward_reader[g] = i;
        first_backward_reader[g] = i;
      }
    };
    const auto& bottoms = bottom_ids_[i];
    for (size_t b = 0; b < bottoms.size(); ++b) {
      touch(groups.of_blob[bottoms[b]], false, layer.BackwardReadsBottomData(static_cast<int>(b)));
    }
    for (size_t t = 0; t < top_ids_[i].size(); ++t) {
      const int blob = top_ids_[i][t];
      const bool in_place = std::find(bottoms.begin(), bottoms.end(), blob) != bottoms.end();
      touch(groups.of_blob[blob], !in_place, layer.BackwardReadsTopData(static_cast<int>(t)));
      last_writer[groups.of_blob[blob]] = i;
    }
  }
  std::vector<bool> excluded = BlobsOutsideThePlan(groups.of_blob, num_groups);
  for (const std::string& name : keep) {
    blob_by_name(name);  // throws kNotFound naming it
    excluded[groups.of_blob[blob_index_.at(name)]] = true;
  }
  for (int g = 0; g < num_groups; ++g) {
    if (touches.first[g] < 0 || !touches.first_writes[g] || excluded[g]) continue;
    const int reader = last_backward_reader[g];
    if (reader < 0) {
      // Alive from the Forward of its producer to that of its last consumer.
      plan->lifetimes.push_back({touches.first[g], touches.last[g], groups.bytes[g],
                                 &groups.tensors[g], &Tensor::UseDataBuffer});
    } else if (through_backward) {
      const int writer = last_writer[g];
      if (options_.recompute && writer >= 0 && reader >= writer && top_ids_[writer].size() == 1 &&
          layers_[writer]->CanRecomputeTops()) {
        // Its writer (the last, and only Backwards from it on read it) can write it again: alive
        // in Forward from its producer to its last reader, then again in Backward from its first
        // reader to its last, in another buffer.
        auto recomputed = std::make_unique<Recomputed>();
        recomputed->layer = writer;
        recomputed->first_reader = first_backward_reader[g];
        recomputed->last_reader = reader;
        recomputed->tensors = groups.tensors[g];
        Lifetime forward{touches.first[g], touches.last[g], groups.bytes[g], &groups.tensors[g],
                         &Tensor::UseDataBuffer};
        forward.record = &recomputed->forward_buffer;
        Lifetime backward{offset + num_layers - 1 - first_backward_reader[g],
                          offset + num_layers - 1 - reader, groups.bytes[g], &groups.tensors[g],
                          nullptr};
        backward.record = &recomputed->backward_buffer;
        backward.counted = false;
        plan->lifetimes.push_back(forward);
        plan->lifetimes.push_back(backward);
        plan->recomputed.push_back(std::move(recomputed));
        continue;
      }
      // Alive from the Forward of its producer to the Backward of its last reader.
      // Its own buffer, as outside the plan, for the gradients that come after it.
      plan->lifetimes.push_back({touches.first[g], offset + num_layers - 1 - reader,
                                 groups.bytes[g], &groups.tensors[g], &Tensor::UseDataBuffer,
                                 /*alone=*/true});
    }
  }
}

size_t Net::ShareDiffBuffers() {
  recomputed_.clear();
  BufferPlan plan;
  PlanDiffs(&plan, 0);
  return PackBuffers(std::move(plan.lifetimes), name_, "gradients");
}

size_t Net::ShareDataBuffers(const std::vector<std::string>& keep) {
  recomputed_.clear();
  BufferPlan plan;
  PlanData(&plan, keep, /*through_backward=*/false, 0);
  return PackBuffers(std::move(plan.lifetimes), name_, "data");
}

size_t Net::ShareTrainingBuffers() {
  // Forward's steps are 0 to L - 1, Backward's L to 2L - 1.
  const int num_layers = static_cast<int>(layers_.size());
  BufferPlan plan;
  PlanDiffs(&plan, num_layers);
  PlanData(&plan, {}, /*through_backward=*/true, num_layers);
  recomputed_.clear();
  const size_t saved = PackBuffers(std::move(plan.lifetimes), name_, "gradients and data");
  for (auto& recomputed : plan.recomputed) recomputed_.push_back(std::move(*recomputed));
  if (!recomputed_.empty()) {
    CORTADO_LOG_DEBUG("net '{}': {} blobs recomputed in Backward", name_, recomputed_.size());
  }
  return saved;
}

namespace {

size_t LargestBytes(const std::vector<Tensor*>& tensors) {
  size_t bytes = 0;
  for (const Tensor* t : tensors) {
    bytes = std::max(bytes, t->home_bytes());
  }
  return bytes;
}

}  // namespace

void Net::RestoreRecomputedBlobs() {
  for (auto it = recomputed_.begin(); it != recomputed_.end();) {
    const size_t bytes = LargestBytes(it->tensors);
    if (bytes > it->forward_buffer->size() || bytes > it->backward_buffer->size()) {
      // Outgrown by a Reshape: a buffer of its own from now on, as Tensor::Reshape gives one
      // (the blobs may be holding their Backward buffer, which others use).
      auto own = std::make_shared<SyncedMemory>(bytes);
      for (Tensor* t : it->tensors) t->UseDataBuffer(own);
      it = recomputed_.erase(it);
      continue;
    }
    for (Tensor* t : it->tensors) t->UseDataBuffer(it->forward_buffer);
    it->done = false;
    ++it;
  }
}

void Net::RecomputeBlobsFor(int i) {
  for (Recomputed& r : recomputed_) {
    if (r.done || i > r.first_reader || i < r.last_reader) continue;
    r.done = true;
    // Grown by a Reshape during Forward beyond the Backward buffer: into a buffer of its own
    // (the next Forward takes it out of the plan).
    const size_t bytes = LargestBytes(r.tensors);
    const std::shared_ptr<SyncedMemory> buffer = bytes > r.backward_buffer->size()
                                                     ? std::make_shared<SyncedMemory>(bytes)
                                                     : r.backward_buffer;
    for (Tensor* t : r.tensors) t->UseDataBuffer(buffer);
    layers_[r.layer]->RecomputeTops(top_vecs_[r.layer]);
    if (num_blocked_blobs_ > 0) FlushBlockedTwins(top_vecs_[r.layer]);
  }
}

void Net::FlattenParamDiffs() {
  flat_diff_.reset();
  flat_diff_views_.clear();
  learnable_param_offsets_.clear();
  size_t end = 0;
  for (Tensor* param : learnable_params_) {
    const size_t offset = (end + kFlatDiffAlignment - 1) / kFlatDiffAlignment * kFlatDiffAlignment;
    learnable_param_offsets_.push_back(offset);
    end = offset + static_cast<size_t>(param->count());
  }
  flat_diff_count_ = end;
  if (flat_diff_count_ == 0) return;  // nothing to lay out
  flat_diff_ = std::make_shared<SyncedMemory>(sizeof(float) * flat_diff_count_);
  for (size_t i = 0; i < learnable_params_.size(); ++i) {
    Tensor* param = learnable_params_[i];
    const size_t bytes = sizeof(float) * static_cast<size_t>(param->count());
    auto view = std::make_shared<SyncedMemory>(flat_diff_,
                                               sizeof(float) * learnable_param_offsets_[i], bytes);
    // Gradients are zero until the first Backward, but keep whatever a layer already wrote.
    const std::shared_ptr<SyncedMemory>& old = param->diff();
    if (old != nullptr && old->head() != SyncedMemory::Head::kUninitialized && bytes > 0) {
      std::memcpy(view->mutable_host_data(), old->host_data(), bytes);
    }
    param->UseDiffBuffer(view);
    flat_diff_views_.push_back(std::move(view));
  }
  // Shared parameters took their owner's diff when they were appended: take the view instead.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (param_owners_[i] >= 0) params_[i]->ShareDiff(*params_[param_owners_[i]]);
  }
}

bool Net::FlatDiffIntact() const {
  for (size_t i = 0; i < flat_diff_views_.size(); ++i) {
    if (learnable_params_[i]->diff() != flat_diff_views_[i]) return false;
  }
  return true;
}

void Net::CheckFlatDiff() const {
  for (size_t i = 0; i < flat_diff_views_.size(); ++i) {
    CORTADO_CHECK(learnable_params_[i]->diff() == flat_diff_views_[i],
                  "net '{}': the gradient of learnable parameter {} ({}) no longer lives in the "
                  "flat gradient buffer (was it reshaped?)",
                  name_, i, param_display_names_[learnable_param_ids_[i]]);
  }
}

const float* Net::flat_cpu_diff() const {
  if (flat_diff_ == nullptr) return nullptr;
  CheckFlatDiff();
  return static_cast<const float*>(flat_diff_->host_data());
}

float* Net::mutable_flat_cpu_diff() {
  if (flat_diff_ == nullptr) return nullptr;
  CheckFlatDiff();
  return static_cast<float*>(flat_diff_->mutable_host_data());
}

const float* Net::flat_gpu_diff() const {
  if (flat_diff_ == nullptr) return nullptr;
  CheckFlatDiff();
  return static_cast<const float*>(flat_diff_->device_data());
}

float* Net::mutable_flat_gpu_diff() {
  if (flat_diff_ == nullptr) return nullptr;
  CheckFlatDiff();
  return static_cast<float*>(flat_diff_->mutable_device_data());
}

}  // namespace cortado
