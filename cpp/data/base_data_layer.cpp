// SPDX-License-Identifier: Apache-2.0
#include "data/base_data_layer.hpp"

#include <algorithm>
#include <cstring>

#include "core/logging.hpp"

namespace cortado {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Rng BatchRng(uint64_t seed, int64_t batch_index) {
  const uint64_t h = SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(batch_index));
  std::seed_seq seq{static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)};
  return Rng(seq);
}

BasePrefetchingDataLayer::BasePrefetchingDataLayer(const caffe::LayerParameter& param, Context* ctx)
    : Layer(param, ctx) {}

BasePrefetchingDataLayer::~BasePrefetchingDataLayer() {
  StopPrefetch();
#if CORTADO_WITH_CUDA
  ReleaseStaging();
#endif
}

void BasePrefetchingDataLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                                     const std::vector<Tensor*>& top) {
  // Two draws make a 64-bit seed; the context's engine is seeded per run, so this repeats.
  Rng& rng = ctx_->rng();
  const uint64_t high = rng();
  seed_ = (high << 32) | static_cast<uint64_t>(rng());
  DataSetup(top);
  set_up_ = true;
  StartPrefetch(0);
}

void BasePrefetchingDataLayer::StartPrefetch(int64_t first_index) {
  CORTADO_CHECK(!thread_.joinable(), "prefetch thread already running");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Ready batches belong to the old position: recycle them.
    while (!full_.empty()) {
      free_.push_back(std::move(full_.front()));
      full_.pop_front();
    }
    const int wanted = std::max(1, PrefetchCount());
    while (static_cast<int>(free_.size()) < wanted) free_.push_back(std::make_unique<DataBatch>());
    error_ = nullptr;
    stop_ = false;
    producer_done_ = false;
  }
  next_index_ = first_index;
  thread_ = std::thread([this, first_index] { ProducerLoop(first_index); });
}

void BasePrefetchingDataLayer::StopPrefetch() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  free_cv_.notify_all();
  if (thread_.joinable()) {
    try {
      thread_.join();
    } catch (const std::exception& e) {
      CORTADO_LOG_ERROR("{}: cannot join the prefetch thread: {}", Describe(), e.what());
    }
  }
}

void BasePrefetchingDataLayer::ProducerLoop(int64_t first_index) {
  std::unique_ptr<DataBatch> batch;
  try {
    for (int64_t index = first_index;; ++index) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        free_cv_.wait(lock, [this] { return stop_ || !free_.empty(); });
        if (stop_) break;
        batch = std::move(free_.front());
        free_.pop_front();
      }
      const int64_t source_index = index * num_shards_ + shard_;
      Rng rng = BatchRng(seed_, source_index);
      batch->index = index;
      LoadBatch(source_index, &rng, batch.get());
      {
        std::lock_guard<std::mutex> lock(mutex_);
        full_.push_back(std::move(batch));
      }
      full_cv_.notify_one();
    }
  } catch (...) {
    // Handed to the solver's thread by the next Forward that finds no ready batch.
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (batch) free_.push_back(std::move(batch));
    producer_done_ = true;
  }
  full_cv_.notify_all();
}

void BasePrefetchingDataLayer::Seek(int64_t batch_index) {
  if (!set_up_) {
    CORTADO_THROW(kInvalidArgument, "{}: Seek({}) before the layer is set up", Describe(),
                  batch_index);
  }
  if (batch_index < 0) {
    CORTADO_THROW(kInvalidArgument, "{}: Seek({}): the batch index must be >= 0", Describe(),
                  batch_index);
  }
  StopPrefetch();
  StartPrefetch(batch_index);
}

void BasePrefetchingDataLayer::SetShard(int shard, int num_shards) {
  if (num_shards < 1 || shard < 0 || shard >= num_shards) {
    CORTADO_THROW(kInvalidArgument, "{}: shard {} of {} does not exist", Describe(), shard,
                  num_shards);
  }
  if (shard == shard_ && num_shards == num_shards_) return;
  const bool running = set_up_;
  if (running) StopPrefetch();
  shard_ = shard;
  num_shards_ = num_shards;
  if (running) StartPrefetch(next_index_);
}

std::unique_ptr<DataBatch> BasePrefetchingDataLayer::TakeBatch(const std::vector<Tensor*>& top) {
  std::unique_ptr<DataBatch> batch;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    full_cv_.wait(lock, [this] { return !full_.empty() || producer_done_; });
    if (full_.empty()) {
      if (error_) std::rethrow_exception(error_);
      CORTADO_THROW(kInternal, "{}: Forward with no prefetch thread running", Describe());
    }
    batch = std::move(full_.front());
    full_.pop_front();
  }
  CORTADO_CHECK_EQ(batch->index, next_index_, "{}: batch out of order", Describe());
  CORTADO_CHECK_EQ(batch->tops.size(), top.size(), "{}: batch has the wrong number of tops",
                   Describe());
  for (size_t i = 0; i < top.size(); ++i) {
    top[i]->Reshape(batch->shapes[i]);
    CORTADO_CHECK_EQ(static_cast<size_t>(top[i]->count()), batch->tops[i].size());
  }
  ++next_index_;
  return batch;
}

void BasePrefetchingDataLayer::Recycle(std::unique_ptr<DataBatch> batch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(std::move(batch));
  }
  free_cv_.notify_one();
}

void BasePrefetchingDataLayer::ForwardCpu(const std::vector<Tensor*>& /*bottom*/,
                                          const std::vector<Tensor*>& top) {
  std::unique_ptr<DataBatch> batch = TakeBatch(top);
  for (size_t i = 0; i < top.size(); ++i) {
    if (batch->tops[i].empty()) continue;  // a top of no values (a dimension of 0)
    std::memcpy(top[i]->mutable_cpu_data(), batch->tops[i].data(),
                batch->tops[i].size() * sizeof(float));
  }
  Recycle(std::move(batch));
}

}  // namespace cortado
