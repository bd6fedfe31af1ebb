// SPDX-License-Identifier: Apache-2.0
// BatchFeed: a bounded queue of whole batches that an outside thread (a Spark task's feeder, via
// JNI) fills and a feed data layer (feed_data_layer.hpp) empties.
//
// A batch is one float array per top, holding exactly the top's batch shape. Push copies each
// top with one memcpy, outside the queue's lock, into storage recycled from consumed batches;
// Pop hands the storage to the consumer by swapping vectors (no copy).
//
// Ending: Close() marks the end of the data: batches already queued are still delivered, then
// Pop throws kNotFound ("end of data"). Abort(reason) drops the queued batches and makes Pop
// throw kAborted at once. After either, Push throws kAborted. Both wake every waiting thread.
//
// Threading: any number of pushers and one consumer; every method is thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proto/caffe.pb.h"

namespace cortado {

struct DataBatch;

class BatchFeed {
 public:
  // `owner` names the layer in messages ("layer 'data' (CoSData)"); `top_names` and `shapes`
  // give each top's name and batch shape; `capacity` (>= 1) bounds the queued batches.
  BatchFeed(std::string owner, std::vector<std::string> top_names,
            std::vector<std::vector<int>> shapes, int capacity);
  BatchFeed(const BatchFeed&) = delete;
  BatchFeed& operator=(const BatchFeed&) = delete;

  // Queues one batch: tops[i] points to counts[i] floats. Blocks while `capacity` batches are
  // queued. A wrong number of tops or a wrong count is kInvalidArgument naming the layer, the
  // top and both shapes (nothing is queued); a closed or aborted feed is kAborted.
  void Push(const std::vector<const float*>& tops, const std::vector<size_t>& counts);

  // Waits for the next batch and moves it into `batch` (shapes and tops; the batch's previous
  // storage is kept for later pushes). Throws kNotFound after Close once the queue is empty, and
  // kAborted after Abort.
  void Pop(DataBatch* batch);

  // End of data (see above); idempotent.
  void Close();
  // Stops the feed, dropping queued batches; the first reason is kept. Idempotent.
  void Abort(const std::string& reason);

  const std::string& owner() const { return owner_; }
  const std::vector<std::string>& top_names() const { return top_names_; }
  const std::vector<std::vector<int>>& shapes() const { return shapes_; }
  int capacity() const { return capacity_; }
  // Batches queued now (for tests and logs).
  int queued() const;
  // Batches pushed so far.
  int64_t pushed() const;

 private:
  using Storage = std::vector<std::vector<float>>;

  void CheckBatch(const std::vector<const float*>& tops, const std::vector<size_t>& counts) const;
  // Throws the error of a closed (when `for_push`, or when nothing is queued) or aborted feed.
  [[noreturn]] void ThrowEnded(bool for_push) const;

  const std::string owner_;
  const std::vector<std::string> top_names_;
  const std::vector<std::vector<int>> shapes_;
  const std::vector<size_t> counts_;
  const int capacity_;

  mutable std::mutex mutex_;
  std::condition_variable space_cv_;  // a slot became free, or the feed ended
  std::condition_variable ready_cv_;  // a batch became ready, or the feed ended
  std::deque<Storage> ready_;
  std::vector<Storage> spare_;  // storage of consumed batches, reused by Push
  int reserved_ = 0;            // slots taken by pushes still copying
  int64_t pushed_ = 0;
  bool closed_ = false;
  bool aborted_ = false;
  std::string abort_reason_;
};

}  // namespace cortado
