// SPDX-License-Identifier: Apache-2.0
#include "data/memory_data_layer.hpp"

#include <algorithm>

#include "core/logging.hpp"
#include "data/feed_data_layer.hpp"

namespace cortado {

void MemoryDataLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                            const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.memory_data_param();
  if (p.batch_size() == 0 || p.channels() == 0 || p.height() == 0 || p.width() == 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: memory_data_param batch_size, channels, height and width must all be "
                  "positive, got {}, {}, {}, {}",
                  Describe(), p.batch_size(), p.channels(), p.height(), p.width());
  }
  batch_size_ = static_cast<int>(p.batch_size());
  channels_ = static_cast<int>(p.channels());
  height_ = static_cast<int>(p.height());
  width_ = static_cast<int>(p.width());
  if (param_.has_transform_param()) {
    CORTADO_LOG_WARN("{}: transform_param is not applied to arrays given with Reset", Describe());
  }
}

void MemoryDataLayer::Reshape(const std::vector<Tensor*>& /*bottom*/,
                              const std::vector<Tensor*>& top) {
  top[0]->Reshape(batch_size_, channels_, height_, width_);
  top[1]->Reshape(std::vector<int>{batch_size_});
}

void MemoryDataLayer::Reset(float* data, float* labels, int n) {
  if (data == nullptr || labels == nullptr) {
    CORTADO_THROW(kInvalidArgument, "{}: Reset needs data and labels (got a null pointer)",
                  Describe());
  }
  if (n <= 0 || n % batch_size_ != 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: Reset with {} samples; it must be a positive multiple of the batch size {}",
                  Describe(), n, batch_size_);
  }
  data_ = data;
  labels_ = labels;
  n_ = n;
  pos_ = 0;
}

int MemoryDataLayer::BeginBatch(const std::vector<Tensor*>& top) {
  if (data_ == nullptr) {
    CORTADO_THROW(kInvalidArgument, "{}: Forward before Reset gave it data", Describe());
  }
  top[0]->Reshape(batch_size_, channels_, height_, width_);
  top[1]->Reshape(std::vector<int>{batch_size_});
  const int first = pos_;
  pos_ = (pos_ + batch_size_) % n_;
  return first;
}

void MemoryDataLayer::ForwardCpu(const std::vector<Tensor*>& /*bottom*/,
                                 const std::vector<Tensor*>& top) {
  const int first = BeginBatch(top);
  const size_t sample = static_cast<size_t>(channels_) * height_ * width_;
  std::copy_n(data_ + sample * first, sample * batch_size_, top[0]->mutable_cpu_data());
  std::copy_n(labels_ + first, batch_size_, top[1]->mutable_cpu_data());
}

// CaffeOnSpark's MemoryData with source_class set is fed from the JVM: a FeedDataLayer.
static Registerer<Layer, const caffe::LayerParameter&, Context*> memory_data_registerer(
    "MemoryData", [](const caffe::LayerParameter& param, Context* ctx) -> std::unique_ptr<Layer> {
      if (param.has_source_class()) return std::make_unique<FeedDataLayer>(param, ctx);
      return std::make_unique<MemoryDataLayer>(param, ctx);
    });

}  // namespace cortado
