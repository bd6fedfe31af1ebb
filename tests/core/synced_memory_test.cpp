// SPDX-License-Identifier: Apache-2.0
// SyncedMemory views: pointers offset into the parent, shared state, no allocation of their
// own, and a range check; host-device copies on the stream of the allocating thread's context.
#include "core/synced_memory.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/config.hpp"
#include "core/context.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"
#include "support/gpu_check.hpp"

#if CORTADO_WITH_CUDA
#include "core/cuda.hpp"
#endif

namespace cortado {
namespace {

TEST(SyncedMemoryTest, ViewPointsIntoItsParentAndSharesItsState) {
  auto parent = std::make_shared<SyncedMemory>(10 * sizeof(float));
  SyncedMemory view(parent, 4 * sizeof(float), 3 * sizeof(float));
  EXPECT_EQ(view.size(), 3 * sizeof(float));
  EXPECT_EQ(view.offset(), 4 * sizeof(float));
  EXPECT_EQ(view.parent(), parent);
  EXPECT_EQ(view.head(), SyncedMemory::Head::kUninitialized);
  const size_t before = HostAllocatedBytes();
  auto* values = static_cast<float*>(view.mutable_host_data());
  EXPECT_EQ(HostAllocatedBytes() - before, 10 * sizeof(float));  // the parent, once
  EXPECT_EQ(values, static_cast<float*>(parent->mutable_host_data()) + 4);
  EXPECT_EQ(parent->head(), SyncedMemory::Head::kHost);
  EXPECT_EQ(view.head(), SyncedMemory::Head::kHost);
  values[0] = 2.5f;
  EXPECT_EQ(static_cast<const float*>(parent->host_data())[4], 2.5f);
  // Zero-filled like any buffer, and views of a view add up their offsets.
  SyncedMemory inner(std::make_shared<SyncedMemory>(parent, 4 * sizeof(float), 6 * sizeof(float)),
                     sizeof(float), sizeof(float));
  EXPECT_EQ(static_cast<const float*>(inner.host_data()),
            static_cast<const float*>(parent->host_data()) + 5);
  EXPECT_EQ(static_cast<const float*>(inner.host_data())[0], 0.0f);
}

TEST(SyncedMemoryTest, ViewMustFitItsParent) {
  auto parent = std::make_shared<SyncedMemory>(16);
  EXPECT_THROW(SyncedMemory(parent, 8, 12), Error);
  EXPECT_THROW(SyncedMemory(parent, 20, 0), Error);
  EXPECT_THROW(SyncedMemory(nullptr, 0, 0), Error);
  EXPECT_NO_THROW(SyncedMemory(parent, 16, 0));
}

TEST(SyncedMemoryTest, TensorDiffAsAView) {
  auto parent = std::make_shared<SyncedMemory>(8 * sizeof(float));
  Tensor t({2, 2});
  t.UseDiffBuffer(std::make_shared<SyncedMemory>(parent, 4 * sizeof(float), 4 * sizeof(float)));
  t.mutable_cpu_diff()[3] = 1.0f;
  EXPECT_EQ(static_cast<const float*>(parent->host_data())[7], 1.0f);
  // Reshaping within the count keeps the view; growing gives the tensor a diff of its own.
  t.Reshape({4});
  EXPECT_EQ(t.diff()->parent(), parent);
  t.Reshape({3, 3});
  EXPECT_EQ(t.diff()->parent(), nullptr);
}

#if CORTADO_WITH_CUDA
TEST(SyncedMemoryTest, CopiesGoOnTheAllocatingContextsStreamAndRoundTrip) {
  CORTADO_REQUIRE_GPU();
  std::vector<float> back(256);
  {
    Context gpu(Device::Cuda(0), 1);
    gpu.MakeCurrent();
    EXPECT_EQ(cuda::CurrentStream(), cuda::Stream(gpu));
    SyncedMemory memory(256 * sizeof(float));
    auto* host = static_cast<float*>(memory.mutable_host_data());
    for (int i = 0; i < 256; ++i) host[i] = 0.5f * static_cast<float>(i);
    const void* device = memory.device_data();  // host to device, on the context's stream
    CORTADO_CUDA_CHECK(cudaStreamSynchronize(cuda::Stream(gpu)));
    CORTADO_CUDA_CHECK(
        cudaMemcpy(back.data(), device, 256 * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 256; ++i) ASSERT_EQ(back[static_cast<size_t>(i)], 0.5f * i);
    // Written on the device (on the stream), read back on the host.
    CORTADO_CUDA_CHECK(
        cudaMemsetAsync(memory.mutable_device_data(), 0, 16 * sizeof(float), cuda::Stream(gpu)));
    const auto* read = static_cast<const float*>(memory.host_data());
    for (int i = 0; i < 16; ++i) ASSERT_EQ(read[i], 0.0f);
    for (int i = 16; i < 256; ++i) ASSERT_EQ(read[i], 0.5f * i);
  }
  // The context is gone: the thread has no current stream, and new memory copies as before.
  EXPECT_EQ(cuda::CurrentStream(), nullptr);
  {
    Context gpu(Device::Cuda(0), 1);
    gpu.MakeCurrent();
    Context cpu(Device::Cpu());
    cpu.MakeCurrent();
    EXPECT_EQ(cuda::CurrentStream(), nullptr);  // a CPU context has none
  }
  // Memory that outlives the context it was allocated under copies on the default stream.
  std::unique_ptr<SyncedMemory> outliving;
  {
    Context gpu(Device::Cuda(0), 1);
    gpu.MakeCurrent();
    outliving = std::make_unique<SyncedMemory>(sizeof(float));
    *static_cast<float*>(outliving->mutable_host_data()) = 3.0f;
    outliving->mutable_device_data();
  }
  EXPECT_EQ(*static_cast<const float*>(outliving->host_data()), 3.0f);
  SyncedMemory plain(4 * sizeof(float));
  static_cast<float*>(plain.mutable_host_data())[3] = 7.0f;
  plain.device_data();
  plain.mutable_device_data();
  EXPECT_EQ(static_cast<const float*>(plain.host_data())[3], 7.0f);
}
#endif

}  // namespace
}  // namespace cortado
