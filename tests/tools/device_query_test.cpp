// SPDX-License-Identifier: Apache-2.0
// `cortado device_query`: the build, the CPU and CUDA devices, and the RDMA devices libibverbs
// lists (or a line saying there are none, or that the build has no libibverbs).
#include <gtest/gtest.h>

#include "cli_runner.hpp"
#include "comm/rdma_devices.hpp"
#include "core/context.hpp"

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

// The tool's OpenMP threads wait as this test program's (both restart with GOMP_SPINCOUNT set
// unless the environment chose: core/openmp_wait.hpp), and it says so.
TEST(DeviceQueryCommandTest, SaysHowOpenMpIdleThreadsWait) {
  const auto r = RunCli({"device_query"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.Contains("OpenMP's idle threads: " + Context::OpenMpWait() + "\n")) << r.output;
  EXPECT_EQ(Context::OpenMpWait().find("OpenMP's default"), std::string::npos)
      << Context::OpenMpWait();
}

}  // namespace
}  // namespace cortado
