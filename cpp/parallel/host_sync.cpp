// SPDX-License-Identifier: Apache-2.0
// The ReplicaSync of CPU replicas: buffers are host memory, and root sums, scales and hands back
// between two barriers, as the device-copy backend does on a GPU.
#include <algorithm>

#include "core/error.hpp"
#include "parallel/replica_sync.hpp"

namespace cortado {
namespace {

class HostSync final : public ReplicaSync, private RootExchange {
 public:
  HostSync(int num_replicas, Barrier* barrier) : RootExchange(num_replicas, barrier) {
    CORTADO_CHECK(num_replicas >= 1);
  }

  const char* name() const override { return "host memory"; }

  void Broadcast(int rank, const std::vector<DeviceBuffer>& buffers) override {
    Exchange(rank, buffers, [this] {
      for (size_t j = 1; j < buffers_.size(); ++j) {
        for (size_t i = 0; i < buffers_[0]->size(); ++i) {
          const DeviceBuffer& from = (*buffers_[0])[i];
          std::copy(from.data, from.data + from.count, (*buffers_[j])[i].data);
        }
      }
    });
  }

  void AllReduce(int rank, const std::vector<DeviceBuffer>& buffers, float scale) override {
    Exchange(rank, buffers, [this, scale] {
      const std::vector<DeviceBuffer>& sum = *buffers_[0];
      for (size_t i = 0; i < sum.size(); ++i) {
        float* out = sum[i].data;
        const int count = sum[i].count;
        // Replicas in rank order, so the sum does not depend on timing.
        for (size_t j = 1; j < buffers_.size(); ++j) {
          const float* in = (*buffers_[j])[i].data;
          for (int k = 0; k < count; ++k) out[k] += in[k];
        }
        if (scale != 1.0f) {
          for (int k = 0; k < count; ++k) out[k] *= scale;
        }
        for (size_t j = 1; j < buffers_.size(); ++j) {
          std::copy(out, out + count, (*buffers_[j])[i].data);
        }
      }
    });
  }
};

}  // namespace

std::unique_ptr<ReplicaSync> CreateHostSync(int num_replicas, Barrier* barrier) {
  return std::make_unique<HostSync>(num_replicas, barrier);
}

}  // namespace cortado
