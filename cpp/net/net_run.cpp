// SPDX-License-Identifier: Apache-2.0
// Running a built net: forward and backward passes (whole or a range of layers), the hooks run
// after each layer's backward, reshaping, and the plain SGD update. Building the net is in
// net.cpp, its weights' input and output in net_weights.cpp.
#include <algorithm>
#include <climits>
#include <functional>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "math/on_device.hpp"
#include "net/net.hpp"

namespace cortado {

float Net::ForwardFromTo(int start, int end) {
  CORTADO_CHECK(0 <= start && start <= end && end < static_cast<int>(layers_.size()) + 1);
  float loss = 0.0f;
  if (!recomputed_.empty()) RestoreRecomputedBlobs();
  for (int i = start; i < end; ++i) {
    try {
      const std::vector<Tensor*>& bottoms = bottom_vecs_[i];
      const std::vector<std::vector<int>>& shaped = shaped_for_[i];
      for (size_t b = 0; b < bottoms.size(); ++b) {
        if (b >= shaped.size() || bottoms[b]->shape() != shaped[b]) {
          layers_[i]->Reshape(bottoms, top_vecs_[i]);
          RecordShapes(i);
          break;
        }
      }
      loss += layers_[i]->Forward(bottom_vecs_[i], top_vecs_[i]);
      // A 16-bit layer's writes to float32 blobs (their twins) reach the blobs themselves, which
      // other layers may read through tensors sharing them (a Split's tops).
      if (layers_[i]->HalfTensors() != HalfType::kNone) {
        for (Tensor* top : top_vecs_[i]) top->FlushTwins();
      }
      if (num_blocked_blobs_ > 0) {
        FlushBlockedTwins(top_vecs_[i]);
        FlushBlockedTwins(bottom_vecs_[i]);
      }
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("forward of {}: {}", DescribeLayer(i), e.what()), e.file(),
                  e.line());
    }
  }
  return loss;
}

float Net::Forward() { return ForwardFromTo(0, static_cast<int>(layers_.size())); }

void Net::BackwardFromTo(int start, int end) {
  // Runs layers start, start-1, ..., end (inclusive), as Caffe does.
  CORTADO_CHECK(start < static_cast<int>(layers_.size()) && end >= 0);
  for (int i = start; i >= end; --i) {
    if (layer_need_backward_[i]) {
      try {
        if (!recomputed_.empty()) RecomputeBlobsFor(i);
        layers_[i]->Backward(top_vecs_[i], bottom_need_backward_[i], bottom_vecs_[i]);
        if (layers_[i]->HalfTensors() != HalfType::kNone) {
          for (Tensor* bottom : bottom_vecs_[i]) bottom->FlushTwins();
        }
        if (num_blocked_blobs_ > 0) FlushBlockedTwins(bottom_vecs_[i]);
      } catch (const Error& e) {
        throw Error(e.code(), fmt::format("backward of {}: {}", DescribeLayer(i), e.what()),
                    e.file(), e.line());
      }
      if (!after_backward_.empty()) RunAfterBackward(i);
    }
  }
}

void Net::AddAfterBackward(std::function<void(int layer_id)> hook) {
  CORTADO_CHECK(hook != nullptr, "net '{}': an empty after-backward hook", name_);
  after_backward_.push_back(std::move(hook));
}

void Net::RunAfterBackward(int i) {
  // A fused layer's gradients are computed by the layer it is fused into (its followers come
  // right after it): report those once that layer has run, highest index first.
  if (layers_[i]->fused_into() != nullptr) return;
  int last = i;
  while (last + 1 < static_cast<int>(layers_.size()) &&
         layers_[last + 1]->fused_into() == layers_[i].get()) {
    ++last;
  }
  for (int j = last; j >= i; --j) {
    if (j != i && !layer_need_backward_[j]) continue;
    for (const auto& hook : after_backward_) hook(j);
  }
}

void Net::Backward() {
  if (layers_.empty()) return;
  BackwardFromTo(static_cast<int>(layers_.size()) - 1, 0);
}

float Net::ForwardBackward() {
  ClearParamDiffs();
  const float loss = Forward();
  Backward();
  return loss;
}

void Net::Reshape() {
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Reshape(bottom_vecs_[i], top_vecs_[i]);
    RecordShapes(static_cast<int>(i));
  }
}

void Net::RecordShapes(int layer_id) {
  if (shaped_for_.size() <= static_cast<size_t>(layer_id)) shaped_for_.resize(layer_id + 1);
  std::vector<std::vector<int>>& shapes = shaped_for_[layer_id];
  shapes.clear();
  for (const Tensor* bottom : bottom_vecs_[layer_id]) shapes.push_back(bottom->shape());
}

void Net::ClearParamDiffs() {
  // One call for all of them (padding included) while they are still views of the flat buffer.
  if (flat_diff_ != nullptr && flat_diff_count_ <= INT_MAX && FlatDiffIntact()) {
    if (math::dev::OnGpu(*ctx_)) {
      math::dev::Set(*ctx_, static_cast<int>(flat_diff_count_), 0.0f,
                     static_cast<float*>(flat_diff_->mutable_device_data()));
    } else {
      std::fill_n(static_cast<float*>(flat_diff_->mutable_host_data()), flat_diff_count_, 0.0f);
    }
    return;
  }
#if CORTADO_WITH_CUDA
  if (math::dev::OnGpu(*ctx_)) {  // one launch, not one per parameter
    std::vector<math::gpu::DeviceSpan> diffs;
    for (Tensor* param : learnable_params_) {
      if (param->count() > 0) diffs.push_back({param->mutable_gpu_diff(), param->count()});
    }
    math::gpu::ZeroMany(*ctx_, diffs);
    return;
  }
#endif
  for (Tensor* param : learnable_params_) {
    if (param->count() > 0) {
      math::dev::Set(*ctx_, param->count(), 0.0f, math::dev::MutableDiff(*ctx_, *param));
    }
  }
}

void Net::Update() {
  // data -= diff, on the net's device.
  for (Tensor* param : learnable_params_) {
    if (param->count() == 0) continue;
    math::dev::Axpy(*ctx_, param->count(), -1.0f, math::dev::Diff(*ctx_, *param),
                    math::dev::MutableData(*ctx_, *param));
  }
}

}  // namespace cortado