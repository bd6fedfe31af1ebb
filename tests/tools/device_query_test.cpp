// SPDX-License-Identifier: Apache-2.0
// `cortado device_query`: the build, the CPU and CUDA devices, and the RDMA devices libibverbs
// lists (or a line saying there are none, or that the build has no libibverbs).
#include <gtest/gtest.h>

#include "cli_runner.hpp"
#include "comm/rdma_devices.hpp"

namespace cortado {
namespace {

using cli_testing::RunCli;

TEST(DeviceQueryCommandTest, ListsTheRdmaDevicesOrSaysThereAreNone) {
  const auto r = RunCli({"device_query"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("CUDA")) << r.output;
  const auto devices = comm::QueryRdmaDevices();
  if (!comm::RdmaSupportBuilt()) {
    EXPECT_TRUE(r.Contains("RDMA devices: not available (built without libibverbs)")) << r.output;
  } else if (devices.empty()) {
    EXPECT_TRUE(r.Contains("RDMA devices: none (libibverbs lists no device")) << r.output;
  } else {
    EXPECT_TRUE(r.Contains("RDMA devices (libibverbs):")) << r.output;
    for (const auto& device : devices) EXPECT_TRUE(r.Contains(device.name)) << r.output;
  }
}

}  // namespace
}  // namespace cortado
