// SPDX-License-Identifier: Apache-2.0
// BasePrefetchingDataLayer: Caffe's BasePrefetchingDataLayer. A background thread fills a bounded
// queue of ready batches while the solver computes; Forward hands out the next one.
//
// Determinism: batch k (counting from 0 at Setup) is a pure function of (seed, k). Setup draws the
// layer's seed from the context's engine; LoadBatch(k) gets its own engine seeded from a hash of
// (seed, k), so batch k's content and random transforms never depend on how many batches were
// produced before, on timing, or on the queue. Seek(k) restarts the producer at batch k: a run
// resumed from a snapshot sees exactly the data an uninterrupted run would.
//
// Sharding (data-parallel training): with SetShard(r, R) the k-th batch handed out is batch
// k * R + r of the unsharded stream (content and randomness both), while Seek and
// next_batch_index keep counting k; R shards of batch size b together read what one unsharded
// layer of batch size R * b reads.
//
// Errors: an exception thrown by LoadBatch on the prefetch thread is kept (std::exception_ptr)
// and rethrown by the Forward that would have returned that batch, in the caller's thread.
// Batches produced before the failure are still delivered first. The thread never terminates the
// process; Seek clears a stored error and starts afresh.
//
// Subclasses implement DataSetup (read params, shape the tops, open sources) and LoadBatch (runs
// on the prefetch thread; it may use state created in DataSetup and state only it touches).
// Because the thread calls into the subclass, every subclass destructor must call
// StopPrefetch() first (the base destructor calls it too, for safety).
//
// Threading: the public methods are called from one (the solver's) thread; the layer owns its
// prefetch thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "layers/layer.hpp"

struct CUevent_st;  // cudaEvent_t is a CUevent_st*

namespace cortado {

// One prefetched batch: per top, its shape and its values (row-major).
struct DataBatch {
  int64_t index = -1;
  std::vector<std::vector<int>> shapes;
  std::vector<std::vector<float>> tops;
};

// The engine for batch `batch_index` of a layer with seed `seed` (splitmix64 hash of both).
Rng BatchRng(uint64_t seed, int64_t batch_index);

class BasePrefetchingDataLayer : public Layer {
 public:
  BasePrefetchingDataLayer(const caffe::LayerParameter& param, Context* ctx);
  ~BasePrefetchingDataLayer() override;

  int ExactNumBottomBlobs() const override { return 0; }
  int MinTopBlobs() const override { return 1; }

  // Draws the seed, runs DataSetup and starts the prefetch thread at batch 0.
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) final;
  // Tops are shaped by DataSetup and by each Forward.
  void Reshape(const std::vector<Tensor*>& /*bottom*/, const std::vector<Tensor*>& /*top*/) final {}

  // Restarts the producer so that the next Forward returns batch `batch_index` (>= 0). Discards
  // prefetched batches and any stored error. Throws kInvalidArgument before Setup.
  void Seek(int64_t batch_index) override;
  // Reads every num_shards-th batch from batch `shard` on (see above); restarts the producer at
  // next_batch_index(). Throws kInvalidArgument for a shard outside [0, num_shards).
  void SetShard(int shard, int num_shards) override;
  // Index of the batch the next Forward returns.
  int64_t next_batch_index() const { return next_index_; }
  uint64_t seed() const { return seed_; }

 protected:
  // Reads parameters, opens the source and shapes the tops (batch size first).
  virtual void DataSetup(const std::vector<Tensor*>& top) = 0;
  // Fills `batch` (one entry per top, already sized from the previous use, or empty) with batch
  // number `index` of the source (unsharded numbering), drawing any randomness from `rng`. Runs
  // on the prefetch thread; may throw.
  virtual void LoadBatch(int64_t index, Rng* rng, DataBatch* batch) = 0;
  // Number of batches kept ready ahead of Forward.
  virtual int PrefetchCount() const { return 3; }

  // Stops and joins the prefetch thread; idempotent, never throws.
  void StopPrefetch() noexcept;

  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>&, const std::vector<bool>&,
                   const std::vector<Tensor*>&) override {}
  // GPU: the batch, produced on the host, is copied into pinned staging memory and from there
  // to the tops' device memory on the context's stream (base_data_layer.cu). Backward: nothing.
  CORTADO_GPU_PASSES;

 private:
  void StartPrefetch(int64_t first_index);
  void ProducerLoop(int64_t first_index);
  // Waits for the next ready batch (rethrowing a prefetch error), checks it, shapes the tops
  // after it and advances next_index_; the caller copies it out and hands it to Recycle.
  std::unique_ptr<DataBatch> TakeBatch(const std::vector<Tensor*>& top);
  void Recycle(std::unique_ptr<DataBatch> batch);
#if CORTADO_WITH_CUDA
  // Waits for the last host-to-device copy and frees the staging memory; never throws.
  void ReleaseStaging() noexcept;

  float* staging_ = nullptr;         // pinned host memory the device copies read from
  size_t staging_floats_ = 0;        // its capacity
  CUevent_st* copy_done_ = nullptr;  // recorded after the last copy out of staging_
#endif

  uint64_t seed_ = 0;
  bool set_up_ = false;
  // Batch k of this layer is batch k * num_shards_ + shard_ of the source (read by the producer,
  // changed only while it is stopped).
  int shard_ = 0;
  int num_shards_ = 1;
  int64_t next_index_ = 0;

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable free_cv_;  // a free batch is available, or stop requested
  std::condition_variable full_cv_;  // a ready batch or an error is available
  std::deque<std::unique_ptr<DataBatch>> free_;
  std::deque<std::unique_ptr<DataBatch>> full_;
  std::exception_ptr error_;
  bool stop_ = false;          // asks the producer to exit
  bool producer_done_ = true;  // the producer has exited (or never started)
};

}  // namespace cortado
