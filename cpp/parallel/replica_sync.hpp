// SPDX-License-Identifier: Apache-2.0
// ReplicaSync: how the replicas of a data-parallel Trainer combine their parameters, with three
// backends: NCCL (one communicator per device, collectives on each replica's stream), device
// copies (root gathers, sums and hands back through cudaMemcpyPeerAsync; replicas may share a
// device, and no NCCL is needed) and host memory (CPU replicas: root sums in place).
//
// Every replica's thread calls each operation, in the same order, with its own buffers: device
// memory on its own device, buffer i holding the same number of floats on every replica. An
// operation starts with a barrier of all replicas, so no replica starts a collective that a
// replica which already failed would never join, and what a replica wrote before the call is
// visible to the others after it. When it returns, this replica's buffers hold the result or
// the work that produces it is queued on its stream, ahead of anything it queues later.
// A failure in one replica aborts the shared Barrier, so the others' calls throw kAborted
// instead of waiting.
#pragma once

#include <memory>
#include <vector>

#include "core/config.hpp"
#include "core/context.hpp"
#include "core/error.hpp"
#include "parallel/barrier.hpp"

namespace cortado {

// `count` floats of the replica's memory: device memory, or host memory for a CPU replica.
struct DeviceBuffer {
  float* data = nullptr;
  int count = 0;
};

class ReplicaSync {
 public:
  virtual ~ReplicaSync() = default;

  // "nccl", "device copies" or "host memory", for the log.
  virtual const char* name() const = 0;
  // Replica `rank`'s buffers become replica 0's.
  virtual void Broadcast(int rank, const std::vector<DeviceBuffer>& buffers) = 0;
  // Replica `rank`'s buffers become scale * (the sum of every replica's buffers).
  virtual void AllReduce(int rank, const std::vector<DeviceBuffer>& buffers, float scale) = 0;
  // Called after a failure, once no replica thread runs: releases collectives that may still be
  // waiting on a device for a replica that never joined them. Never throws.
  virtual void Abort() noexcept {}
};

// What the root-centred backends (host memory, device copies) share: each replica publishes its
// buffers and meets the others at the barrier; root checks that every replica's buffers match
// its own, runs the backend's work over all of them, and everyone meets again, after which the
// buffers may change.
class RootExchange {
 protected:
  RootExchange(int num_replicas, Barrier* barrier) : barrier_(barrier), buffers_(num_replicas) {}

  template <typename F>
  void Exchange(int rank, const std::vector<DeviceBuffer>& buffers, F&& root_work) {
    buffers_[rank] = &buffers;  // valid until this replica passes the second barrier
    barrier_->Wait();
    if (rank == 0) {
      for (size_t j = 1; j < buffers_.size(); ++j) {
        CORTADO_CHECK_EQ(buffers_[j]->size(), buffers.size(), "replica {} has other buffers", j);
        for (size_t i = 0; i < buffers.size(); ++i) {
          CORTADO_CHECK_EQ((*buffers_[j])[i].count, buffers[i].count,
                           "buffer {} of replica {} has another size than root's", i, j);
        }
      }
      root_work();
    }
    barrier_->Wait();
  }

  Barrier* barrier_;
  // buffers_[r]: replica r's argument of the current operation.
  std::vector<const std::vector<DeviceBuffer>*> buffers_;
};

// For `num_replicas` CPU replicas sharing `barrier` (which must outlive the returned object).
std::unique_ptr<ReplicaSync> CreateHostSync(int num_replicas, Barrier* barrier);

#if CORTADO_WITH_CUDA
// contexts[r]: replica r's context, on a CUDA device (devices may repeat); `barrier` is shared by
// the replicas, one count per context. Both must outlive the returned object. The calling thread
// may have its current device changed.
std::unique_ptr<ReplicaSync> CreateDeviceCopySync(const std::vector<Context*>& contexts,
                                                  Barrier* barrier);
#endif
#if CORTADO_WITH_NCCL
// As above; the devices must be distinct. Throws kComm when NCCL cannot set up.
std::unique_ptr<ReplicaSync> CreateNcclSync(const std::vector<Context*>& contexts,
                                            Barrier* barrier);
#endif

}  // namespace cortado
