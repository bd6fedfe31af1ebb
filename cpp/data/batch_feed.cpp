// SPDX-License-Identifier: Apache-2.0
#include "data/batch_feed.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "data/base_data_layer.hpp"

namespace cortado {
namespace {

size_t Count(const std::vector<int>& shape) {
  size_t n = 1;
  for (int d : shape) n *= static_cast<size_t>(d);
  return n;
}

// "64 1 28 28 (50176)", as Tensor::ShapeString writes shapes.
std::string ShapeText(const std::vector<int>& shape) {
  return fmt::format("{} ({})", fmt::join(shape, " "), Count(shape));
}

// What `count` floats would be as whole samples of `shape` (batch axis first), or just the
// count when they are not.
std::string GotText(const std::vector<int>& shape, size_t count) {
  if (shape.empty() || shape[0] <= 0) return fmt::format("{} floats", count);
  const size_t sample = Count(shape) / static_cast<size_t>(shape[0]);
  if (sample == 0 || count % sample != 0) return fmt::format("{} floats", count);
  std::vector<int> got = shape;
  got[0] = static_cast<int>(count / sample);
  return ShapeText(got);
}

}  // namespace

BatchFeed::BatchFeed(std::string owner, std::vector<std::string> top_names,
                     std::vector<std::vector<int>> shapes, int capacity)
    : owner_(std::move(owner)),
      top_names_(std::move(top_names)),
      shapes_(std::move(shapes)),
      counts_([this] {
        std::vector<size_t> counts;
        for (const auto& shape : shapes_) counts.push_back(Count(shape));
        return counts;
      }()),
      capacity_(capacity) {
  CORTADO_CHECK_EQ(top_names_.size(), shapes_.size());
  CORTADO_CHECK(capacity_ >= 1, "{}: feed capacity {} must be >= 1", owner_, capacity_);
}

void BatchFeed::CheckBatch(const std::vector<const float*>& tops,
                           const std::vector<size_t>& counts) const {
  if (tops.size() != shapes_.size() || counts.size() != shapes_.size()) {
    CORTADO_THROW(kInvalidArgument, "{}: a batch needs {} tops ({}), got {}", owner_,
                  shapes_.size(), fmt::join(top_names_, ", "), tops.size());
  }
  for (size_t i = 0; i < shapes_.size(); ++i) {
    if (counts[i] != counts_[i]) {
      CORTADO_THROW(kInvalidArgument, "{}: top '{}' needs a batch of shape {}, got {}", owner_,
                    top_names_[i], ShapeText(shapes_[i]), GotText(shapes_[i], counts[i]));
    }
    if (tops[i] == nullptr && counts[i] != 0) {
      CORTADO_THROW(kInvalidArgument, "{}: top '{}': no data (null pointer)", owner_,
                    top_names_[i]);
    }
  }
}

void BatchFeed::ThrowEnded(bool for_push) const {
  if (aborted_) CORTADO_THROW(kAborted, "{}: the feed was aborted: {}", owner_, abort_reason_);
  if (for_push) CORTADO_THROW(kAborted, "{}: push after the feed was closed", owner_);
  CORTADO_THROW(kNotFound, "{}: end of data: the feed was closed after {} batches, all consumed",
                owner_, pushed_);
}

void BatchFeed::Push(const std::vector<const float*>& tops, const std::vector<size_t>& counts) {
  CheckBatch(tops, counts);
  Storage storage;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    space_cv_.wait(lock, [this] {
      return closed_ || aborted_ || static_cast<int>(ready_.size()) + reserved_ < capacity_;
    });
    if (closed_ || aborted_) ThrowEnded(/*for_push=*/true);
    ++reserved_;
    if (!spare_.empty()) {
      storage = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  try {
    storage.resize(shapes_.size());
    for (size_t i = 0; i < shapes_.size(); ++i) {
      storage[i].resize(counts_[i]);
      if (counts_[i] > 0) std::memcpy(storage[i].data(), tops[i], counts_[i] * sizeof(float));
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    --reserved_;
    space_cv_.notify_one();
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --reserved_;
    if (closed_ || aborted_) ThrowEnded(/*for_push=*/true);
    ready_.push_back(std::move(storage));
    ++pushed_;
  }
  ready_cv_.notify_one();
}

void BatchFeed::Pop(DataBatch* batch) {
  Storage storage;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_cv_.wait(lock, [this] { return aborted_ || closed_ || !ready_.empty(); });
    if (aborted_ || ready_.empty()) ThrowEnded(/*for_push=*/false);
    storage = std::move(ready_.front());
    ready_.pop_front();
  }
  space_cv_.notify_one();
  // The batch's old storage goes back to the pushers.
  std::swap(storage, batch->tops);
  batch->shapes = shapes_;
  if (storage.size() == shapes_.size()) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int>(spare_.size()) < capacity_) spare_.push_back(std::move(storage));
  }
}

void BatchFeed::Close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  space_cv_.notify_all();
  ready_cv_.notify_all();
}

void BatchFeed::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) abort_reason_ = reason;
    aborted_ = true;
    ready_.clear();
  }
  space_cv_.notify_all();
  ready_cv_.notify_all();
}

int BatchFeed::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(ready_.size());
}

int64_t BatchFeed::pushed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pushed_;
}

}  // namespace cortado
