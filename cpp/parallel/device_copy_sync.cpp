// SPDX-License-Identifier: Apache-2.0
// The device-copy backend of ReplicaSync. Each replica finishes its stream and meets the others
// at a barrier; root then does all the work on its own stream: it brings every other replica's
// buffer over (cudaMemcpyPeerAsync into a scratch buffer when the devices differ, nothing when
// they share root's device), adds it to its own (math::gpu::Axpy, replicas in rank order, so the
// sum repeats bit for bit), scales, copies the result into every other replica's buffer, and
// waits for its stream. A second barrier then lets the others go on. Between the two barriers
// no replica other than root touches its buffers, so nobody reads or overwrites one early.
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "core/cuda.hpp"
#include "core/logging.hpp"
#include "math/gpu.hpp"
#include "parallel/replica_sync.hpp"

namespace cortado {
namespace {

class DeviceCopySync final : public ReplicaSync, private RootExchange {
 public:
  DeviceCopySync(const std::vector<Context*>& contexts, Barrier* barrier)
      : RootExchange(static_cast<int>(contexts.size()), barrier), contexts_(contexts) {
    CORTADO_CHECK(!contexts_.empty());
    for (const Context* ctx : contexts_) {
      CORTADO_CHECK(ctx->device().is_cuda(), "the device-copy sync needs CUDA replicas, not {}",
                    ctx->device().ToString());
    }
    EnablePeerAccess();
  }

  ~DeviceCopySync() override {
    if (scratch_ != nullptr && cudaFree(scratch_) != cudaSuccess) {
      CORTADO_LOG_ERROR("cudaFree failed for the gradient scratch buffer ({} floats)",
                        scratch_count_);
    }
  }

  const char* name() const override { return "device copies"; }

  void Broadcast(int rank, const std::vector<DeviceBuffer>& buffers) override {
    Exchange(rank, buffers, [this] {
      for (size_t j = 1; j < contexts_.size(); ++j) {
        for (size_t i = 0; i < buffers_[0]->size(); ++i) {
          Copy((*buffers_[0])[i], 0, (*buffers_[j])[i], static_cast<int>(j));
        }
      }
    });
  }

  void AllReduce(int rank, const std::vector<DeviceBuffer>& buffers, float scale) override {
    Exchange(rank, buffers, [this, scale] {
      Context& root = *contexts_[0];
      const std::vector<DeviceBuffer>& sum = *buffers_[0];
      for (size_t j = 1; j < contexts_.size(); ++j) {
        const bool same_device = DeviceOf(static_cast<int>(j)) == DeviceOf(0);
        for (size_t i = 0; i < sum.size(); ++i) {
          const DeviceBuffer& other = (*buffers_[j])[i];
          if (other.count == 0) continue;
          const float* addend = other.data;
          if (!same_device) {
            const DeviceBuffer scratch = Scratch(other.count);
            Copy(other, static_cast<int>(j), scratch, 0);
            addend = scratch.data;
          }
          math::gpu::Axpy(root, other.count, 1.0f, addend, sum[i].data);
        }
      }
      for (const DeviceBuffer& b : sum) {
        if (scale != 1.0f && b.count > 0) math::gpu::Scale(root, b.count, scale, b.data);
      }
      for (size_t j = 1; j < contexts_.size(); ++j) {
        for (size_t i = 0; i < sum.size(); ++i) {
          Copy(sum[i], 0, (*buffers_[j])[i], static_cast<int>(j));
        }
      }
    });
  }

 private:
  int DeviceOf(int rank) const { return contexts_[rank]->device().id; }

  // RootExchange with the device work finished: each replica's before the first barrier, and
  // root's before the second.
  template <typename F>
  void Exchange(int rank, const std::vector<DeviceBuffer>& buffers, F&& root_work) {
    contexts_[rank]->Synchronize();
    RootExchange::Exchange(rank, buffers, [&] {
      root_work();
      contexts_[0]->Synchronize();
    });
  }

  // Queues on root's stream a copy between replica `from_rank`'s and `to_rank`'s memory (one of
  // them is root).
  void Copy(const DeviceBuffer& from, int from_rank, const DeviceBuffer& to, int to_rank) {
    if (from.count == 0) return;
    const size_t bytes = sizeof(float) * static_cast<size_t>(from.count);
    cudaStream_t stream = cuda::Stream(*contexts_[0]);
    if (DeviceOf(from_rank) == DeviceOf(to_rank)) {
      CORTADO_CUDA_CHECK(
          cudaMemcpyAsync(to.data, from.data, bytes, cudaMemcpyDeviceToDevice, stream));
    } else {
      CORTADO_CUDA_CHECK(cudaMemcpyPeerAsync(to.data, DeviceOf(to_rank), from.data,
                                             DeviceOf(from_rank), bytes, stream));
    }
  }

  // At least `count` floats on root's device, for the other devices' gradients (reused from
  // buffer to buffer: root's stream orders each copy after the previous Axpy).
  DeviceBuffer Scratch(int count) {
    if (count > scratch_count_) {
      if (scratch_ != nullptr) {
        contexts_[0]->Synchronize();
        CORTADO_CUDA_CHECK(cudaFree(scratch_));
        scratch_ = nullptr;
        scratch_count_ = 0;
      }
      CORTADO_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch_),
                                    sizeof(float) * static_cast<size_t>(count)));
      scratch_count_ = count;
    }
    return {scratch_, count};
  }

  // Lets root's device and each other device read each other's memory directly where the
  // hardware allows; elsewhere cudaMemcpyPeerAsync goes through the host. Best effort.
  void EnablePeerAccess() {
    auto enable = [](int from, int to) {
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess || !can) return;
      if (cudaSetDevice(from) != cudaSuccess) return;
      const cudaError_t status = cudaDeviceEnablePeerAccess(to, 0);
      if (status != cudaSuccess && status != cudaErrorPeerAccessAlreadyEnabled) {
        CORTADO_LOG_WARN("cannot enable peer access from cuda:{} to cuda:{}: {}", from, to,
                         cudaGetErrorString(status));
      }
      cudaGetLastError();  // not sticky; clear it
    };
    for (size_t j = 1; j < contexts_.size(); ++j) {
      if (DeviceOf(static_cast<int>(j)) == DeviceOf(0)) continue;
      enable(DeviceOf(0), DeviceOf(static_cast<int>(j)));
      enable(DeviceOf(static_cast<int>(j)), DeviceOf(0));
    }
  }

  std::vector<Context*> contexts_;
  float* scratch_ = nullptr;  // on root's device; only root's thread uses it
  int scratch_count_ = 0;
};

}  // namespace

std::unique_ptr<ReplicaSync> CreateDeviceCopySync(const std::vector<Context*>& contexts,
                                                  Barrier* barrier) {
  return std::make_unique<DeviceCopySync>(contexts, barrier);
}

}  // namespace cortado
