// SPDX-License-Identifier: Apache-2.0
// SyncedMemory views: pointers offset into the parent, shared state, no allocation of their
// own, and a range check.
#include "core/synced_memory.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "core/error.hpp"
#include "core/tensor.hpp"

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

}  // namespace
}  // namespace cortado
