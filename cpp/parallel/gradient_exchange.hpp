// SPDX-License-Identifier: Apache-2.0
// GradientExchange: the inter-process half of the trainer's gradient seam (DESIGN.md section 4,
// docs/distributed.md). Root's gradients, already summed over the local replicas and scaled by
// 1/R, are summed over the ranks of a Communicator and scaled by 1/size, so that N processes
// of R replicas with batch b train like one replica with batch N * R * b.
//
// Overlap: when the gradients are the net's flat host buffer and nothing has to happen between
// backward and the exchange (one local replica on the CPU; on a GPU with
// ExchangeOptions::overlap_gpu, through host memory), the buffer is cut into buckets of
// about bucket_bytes, in the order backward completes them (from the last layer's parameters to
// the first's). A net hook (Net::AddAfterBackward) hands each bucket to a communication thread
// as soon as backward has passed every layer using its parameters, in the last pass of the
// iteration (iter_size); the thread allreduces the buckets in order while backward goes on, and
// Finish waits for the rest. Every rank starts the same buckets in the same order, so the
// collectives match. Otherwise Finish exchanges everything itself (device gradients go through
// host memory, except with a backend that takes device memory).
//
// BatchNorm: each rank's running mean and variance follow its own batches; Finish replaces them
// with their mean over the ranks every iteration, so that the ranks stay identical (the scale
// factor, the third blob, is the same on every rank and left alone).
//
// Threads: the hook and Finish run on root's thread; only the communication thread calls the
// communicator while buckets are in flight, and only root's thread otherwise. Abort may come
// from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "core/context.hpp"
#include "net/net.hpp"
#include "parallel/replica_sync.hpp"

namespace cortado {

struct ExchangeOptions {
  // The target size of a bucket; a parameter larger than it is a bucket of its own.
  size_t bucket_bytes = size_t{25} << 20;
  // Bucketed overlap with backward, where it applies (see above).
  bool overlap = true;
  // On a GPU too, with a backend that exchanges host memory (tcp, ucx, mpi): each bucket is
  // copied to page-locked host memory once backward has written it (a CUDA event on the compute
  // stream), exchanged there and copied back, on a stream of its own, while backward goes on.
  // Off by default: not yet run on a GPU.
  bool overlap_gpu = false;
  // What the gradients travel as between ranks (Communicator::AllReduceAs): float32, or a
  // 16-bit type for half the bytes. Unset: the compute precision, i.e. the half type of a
  // context that computes in one on a GPU (the solver's `precision: FLOAT16 | BFLOAT16`), else
  // float32. A backend that carries float32 only keeps float32 (said once in the log).
  std::optional<comm::WireType> wire;
};

class GradientExchange {
 public:
  // Exchanges the gradients of `net` (root's train net, on `ctx`) over `comm`; `overlap` says
  // whether the caller allows overlap (a single local replica) on top of options.overlap. All
  // three must outlive this object, and the net's hook must not run after it is destroyed.
  GradientExchange(comm::Communicator* comm, Net* net, Context* ctx, int iter_size, bool overlap,
                   const ExchangeOptions& options);
  ~GradientExchange();
  GradientExchange(const GradientExchange&) = delete;
  GradientExchange& operator=(const GradientExchange&) = delete;

  // Whether buckets overlap with backward; how many there are.
  bool overlapping() const { return overlap_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }

  // Makes `gradients` (root's, see Trainer::GradientHook) the mean over the ranks: waits for the
  // buckets started during backward and starts the rest, or exchanges everything. Rethrows the
  // communicator's error.
  void Finish(const std::vector<DeviceBuffer>& gradients);
  // What the gradients travel as (ExchangeOptions::wire, resolved).
  comm::WireType wire() const { return wire_; }
  // Sums `n` host floats over the ranks (small control values), on root's thread after Finish.
  void AllReduceHost(float* values, size_t n);
  // Aborts the communicator and releases a Finish that waits. Never throws.
  void Abort(const std::string& reason) noexcept;

 private:
  struct Bucket {
    size_t begin = 0;  // in floats, into the flat buffer
    size_t end = 0;
    int ready_layer = 0;  // complete once backward has passed this layer
  };
  void OnLayerBackward(int layer);
  // Queues buckets in order while `ready(bucket)` holds (root's thread).
  void StartBucketsUpTo(int layer);
  void RunCommThread();
  // Exchanges one host range in place (sum as `wire` values, then scale), on the calling thread.
  void ReduceHost(float* data, size_t count, comm::WireType wire);
  // The BatchNorm statistics become their mean over the ranks.
  void AverageStatistics();

  comm::Communicator* comm_;
  Net* net_;
  Context* ctx_;
  int iter_size_;
  bool overlap_;
  float scale_;
  comm::WireType wire_ = comm::WireType::kFloat32;  // options.wire, resolved
  std::vector<Bucket> buckets_;

  // Root's thread: the passes seen in this iteration, the last layer reported, the next bucket
  // to start, whether this iteration overlaps (the flat layout held at its first report).
  int pass_ = 0;
  int last_layer_ = -1;
  size_t next_bucket_ = 0;
  bool iteration_overlaps_ = false;
  float* flat_ = nullptr;
  double last_pass_started_ = 0;  // steady-clock seconds of the last pass's first report

  // Overlap on a GPU (ExchangeOptions::overlap_gpu): the device's flat gradients (flat_ is then
  // their host copy, in staging_), an event per bucket recorded on the compute stream once
  // backward has written it, and the stream the copies go on (opaque CUDA handles).
  bool device_overlap_ = false;
  float* device_flat_ = nullptr;
  std::vector<void*> bucket_ready_;
  void* copy_stream_ = nullptr;
  void ReleaseDeviceOverlap() noexcept;

  std::mutex mutex_;
  std::condition_variable cv_;
  size_t queued_ = 0;            // buckets handed to the thread in this iteration
  size_t done_ = 0;              // buckets it finished
  double exchange_seconds_ = 0;  // the finished buckets' allreduce time in this iteration
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
  // Host copy of device gradients for host backends (tcp, ucx, mpi): page-locked in CUDA builds,
  // so the copies run at the bus's speed and UCX's RDMA transports register it once.
  class PinnedStaging {
   public:
    PinnedStaging() = default;
    PinnedStaging(const PinnedStaging&) = delete;
    PinnedStaging& operator=(const PinnedStaging&) = delete;
    ~PinnedStaging();
    // At least `count` floats; grows, never shrinks.
    float* Reserve(size_t count);

   private:
    float* data_ = nullptr;
    size_t capacity_ = 0;
  };
  PinnedStaging staging_;
  std::vector<Tensor*> statistics_;  // BatchNorm means and variances
  std::vector<float> statistics_staging_;
};

}  // namespace cortado
