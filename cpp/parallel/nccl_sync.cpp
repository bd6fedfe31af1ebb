// SPDX-License-Identifier: Apache-2.0
// The NCCL backend of ReplicaSync: ncclCommInitAll makes one communicator per device (rank r on
// replica r's device), and each replica's thread queues its collectives, grouped, on its own
// stream. A barrier before the collectives keeps a replica from starting one that a failed
// replica would never join; a barrier after them makes sure every replica queued its part
// before any of them waits on its stream (a replica whose queueing failed makes the others
// leave at that barrier, and Abort then cancels what is left on the devices).
#include <nccl.h>

#include "core/cuda.hpp"
#include "core/logging.hpp"
#include "math/gpu.hpp"
#include "parallel/replica_sync.hpp"

// CORTADO_NCCL_CHECK(ncclAllReduce(...)): throws kComm with the call and NCCL's text.
#define CORTADO_NCCL_CHECK(call)                                                             \
  do {                                                                                       \
    const ncclResult_t cortado_nccl_status_ = (call);                                        \
    if (cortado_nccl_status_ != ncclSuccess) {                                               \
      throw ::cortado::Error(                                                                \
          ::cortado::ErrorCode::kComm,                                                       \
          ::fmt::format("NCCL error on cuda:{} in {}: {}", ::cortado::cuda::CurrentDevice(), \
                        #call, ncclGetErrorString(cortado_nccl_status_)),                    \
          __FILE__, __LINE__);                                                               \
    }                                                                                        \
  } while (0)

namespace cortado {
namespace {

class NcclSync final : public ReplicaSync {
 public:
  NcclSync(const std::vector<Context*>& contexts, Barrier* barrier)
      : contexts_(contexts), barrier_(barrier), comms_(contexts.size(), nullptr) {
    std::vector<int> devices;
    for (const Context* ctx : contexts_) {
      CORTADO_CHECK(ctx->device().is_cuda(), "the NCCL sync needs CUDA replicas, not {}",
                    ctx->device().ToString());
      devices.push_back(ctx->device().id);
    }
    CORTADO_NCCL_CHECK(
        ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()));
  }

  ~NcclSync() override { Release(/*abort=*/false); }

  const char* name() const override { return "nccl"; }

  void Broadcast(int rank, const std::vector<DeviceBuffer>& buffers) override {
    cudaStream_t stream = cuda::Stream(*contexts_[rank]);
    barrier_->Wait();
    CORTADO_NCCL_CHECK(ncclGroupStart());
    for (const DeviceBuffer& b : buffers) {
      if (b.count == 0) continue;
      CORTADO_NCCL_CHECK(ncclBroadcast(b.data, b.data, static_cast<size_t>(b.count), ncclFloat,
                                       /*root=*/0, comms_[rank], stream));
    }
    CORTADO_NCCL_CHECK(ncclGroupEnd());
    barrier_->Wait();
  }

  void AllReduce(int rank, const std::vector<DeviceBuffer>& buffers, float scale) override {
    Context& ctx = *contexts_[rank];
    cudaStream_t stream = cuda::Stream(ctx);
    barrier_->Wait();
    CORTADO_NCCL_CHECK(ncclGroupStart());
    for (const DeviceBuffer& b : buffers) {
      if (b.count == 0) continue;
      CORTADO_NCCL_CHECK(ncclAllReduce(b.data, b.data, static_cast<size_t>(b.count), ncclFloat,
                                       ncclSum, comms_[rank], stream));
    }
    CORTADO_NCCL_CHECK(ncclGroupEnd());
    barrier_->Wait();
    if (scale == 1.0f) return;
    for (const DeviceBuffer& b : buffers) {
      if (b.count > 0) math::gpu::Scale(ctx, b.count, scale, b.data);
    }
  }

  // Aborting the communicators cancels collectives still waiting for a replica that never
  // joined them; the replicas cannot synchronise any more afterwards.
  void Abort() noexcept override { Release(/*abort=*/true); }

 private:
  void Release(bool abort) noexcept {
    for (ncclComm_t& comm : comms_) {
      if (comm == nullptr) continue;
      const ncclResult_t status = abort ? ncclCommAbort(comm) : ncclCommDestroy(comm);
      if (status != ncclSuccess) {
        CORTADO_LOG_ERROR("releasing an NCCL communicator failed: {}", ncclGetErrorString(status));
      }
      comm = nullptr;
    }
  }

  std::vector<Context*> contexts_;
  Barrier* barrier_;
  std::vector<ncclComm_t> comms_;  // null once released
};

}  // namespace

std::unique_ptr<ReplicaSync> CreateNcclSync(const std::vector<Context*>& contexts,
                                            Barrier* barrier) {
  return std::make_unique<NcclSync>(contexts, barrier);
}

}  // namespace cortado
