// SPDX-License-Identifier: Apache-2.0
#include "comm/nccl/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/registry.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"

namespace cortado::comm {
namespace {

void CheckCuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    CORTADO_THROW(kCuda, "nccl communicator: {}: {}", what, cudaGetErrorString(status));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const CommOptions& options)
      : Communicator(options.rank, options.world_size), options_(options) {
    CommOptions boot = options;
    boot.backend = "tcp";
    boot.allreduce_algorithm = "ring";  // set-up only: no connections for recursive doubling
    bootstrap_ = CreateCommunicator(boot);
    ncclUniqueId id;
    if (!options.nccl_id.empty()) {
      if (options.nccl_id.size() != sizeof(id)) {
        CORTADO_THROW(kInvalidArgument, "an ncclUniqueId has {} bytes, not {}", sizeof(id),
                      options.nccl_id.size());
      }
      std::memcpy(&id, options.nccl_id.data(), sizeof(id));
    } else {
      if (rank() == 0) Check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      bootstrap_->Broadcast(&id, sizeof(id), 0);
    }
    CheckCuda(cudaSetDevice(options.device), "cudaSetDevice");
    CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t status = ncclCommInitRankConfig(&comm_, size(), id, rank(), &config);
    if (status != ncclSuccess && status != ncclInProgress) {
      Check(status, "ncclCommInitRankConfig");
    }
    WaitForComm("set-up", options.connect_timeout_s);
    CORTADO_LOG_INFO("nccl communicator: rank {} of {} on cuda:{}", rank(), size(), options.device);
  }

  ~NcclCommunicator() override {
    if (comm_ != nullptr) {
      const ncclResult_t status = broken_ ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
      if (status != ncclSuccess) {
        CORTADO_LOG_ERROR("releasing the NCCL communicator: {}", ncclGetErrorString(status));
      }
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const char* backend() const override { return "nccl"; }

  void AllReduce(float* data, size_t count) override {
    CheckUsable();
    if (count == 0) return;
    cudaPointerAttributes attributes{};
    CheckCuda(cudaPointerGetAttributes(&attributes, data), "cudaPointerGetAttributes");
    if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
      bootstrap_->AllReduce(data, count);
      return;
    }
    Guard([&] {
      const ncclResult_t status =
          ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_, stream_);
      if (status != ncclSuccess && status != ncclInProgress) Check(status, "ncclAllReduce");
      WaitForStream("allreduce");
    });
  }

  void Broadcast(void* data, size_t bytes, int root) override {
    CheckUsable();
    bootstrap_->Broadcast(data, bytes, root);
  }

  std::vector<std::string> AllGather(const std::string& mine) override {
    CheckUsable();
    return bootstrap_->AllGather(mine);
  }

  void Barrier() override {
    CheckUsable();
    bootstrap_->Barrier();
  }

  void Abort(const std::string& reason) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (abort_reason_.empty()) abort_reason_ = reason.empty() ? "aborted" : reason;
    }
    aborted_.store(true);
    bootstrap_->Abort(reason);
  }

 private:
  static void Check(ncclResult_t status, const char* what) {
    if (status != ncclSuccess) {
      CORTADO_THROW(kComm, "nccl communicator: {}: {}", what, ncclGetErrorString(status));
    }
  }

  void CheckUsable() {
    if (aborted_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      CORTADO_THROW(kAborted, "nccl communicator (rank {}): {}", rank(), abort_reason_);
    }
    if (broken_) CORTADO_THROW(kComm, "nccl communicator (rank {}) failed earlier", rank());
  }

  template <typename F>
  void Guard(F&& body) {
    try {
      body();
    } catch (...) {
      broken_ = true;
      bootstrap_->Abort("the nccl communicator failed");
      throw;
    }
  }

  // Polls until `done()` says finished, failing on an asynchronous NCCL error, Abort or the
  // timeout (the communicator is then aborted, which ends NCCL's kernels).
  template <typename Done>
  void Poll(const char* what, double timeout_s, Done&& done) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    for (;;) {
      if (done()) return;
      ncclResult_t async = ncclSuccess;
      Check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) {
        broken_ = true;
        CORTADO_THROW(kComm, "nccl communicator (rank {}): {} failed: {} (a peer may be gone)",
                      rank(), what, ncclGetErrorString(async));
      }
      if (aborted_.load()) {
        broken_ = true;
        std::lock_guard<std::mutex> lock(mutex_);
        CORTADO_THROW(kAborted, "nccl communicator (rank {}): {} aborted: {}", rank(), what,
                      abort_reason_);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        broken_ = true;
        CORTADO_THROW(kTimeout, "nccl communicator (rank {}): {} did not complete within {} s",
                      rank(), what, timeout_s);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void WaitForComm(const char* what, double timeout_s) {
    Poll(what, timeout_s, [&] {
      ncclResult_t async = ncclInProgress;
      Check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
      return async == ncclSuccess;
    });
  }

  void WaitForStream(const char* what) {
    Poll(what, options_.timeout_s, [&] {
      const cudaError_t status = cudaStreamQuery(stream_);
      if (status == cudaErrorNotReady) return false;
      CheckCuda(status, what);
      return true;
    });
  }

  CommOptions options_;
  std::unique_ptr<Communicator> bootstrap_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool broken_ = false;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::string abort_reason_;
};

std::unique_ptr<Communicator> MakeNccl(const CommOptions& options) {
  return std::make_unique<NcclCommunicator>(options);
}

}  // namespace

std::string NewNcclId() {
  ncclUniqueId id;
  const ncclResult_t status = ncclGetUniqueId(&id);
  if (status != ncclSuccess) {
    CORTADO_THROW(kComm, "ncclGetUniqueId: {}", ncclGetErrorString(status));
  }
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

CORTADO_REGISTER_COMMUNICATOR(nccl, MakeNccl);
CORTADO_REGISTER_ROOT_RENDEZVOUS(nccl, NewNcclId);

}  // namespace cortado::comm
