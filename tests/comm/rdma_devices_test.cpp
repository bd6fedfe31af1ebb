// SPDX-License-Identifier: Apache-2.0
// The RDMA device listing: rates against ibstat's table, and the device_query lines and active
// ports on whatever this host has (usually no RDMA device at all).
#include "comm/rdma_devices.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cortado::comm {
namespace {

// ibv_port_attr codes.
constexpr uint8_t kWidth1x = 1, kWidth4x = 2, kWidth8x = 4, kWidth12x = 8, kWidth2x = 16;
constexpr uint8_t kSdr = 1, kDdr = 2, kQdr = 4, kFdr10 = 8, kFdr = 16, kEdr = 32, kHdr = 64,
                  kNdr = 128;

bool AnyLineContains(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& line : lines) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(RdmaRateGbpsTest, MatchesIbstat) {
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kSdr, kWidth1x), 2.5);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kDdr, kWidth4x), 20);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kQdr, kWidth4x), 40);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kFdr10, kWidth4x), 40);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kFdr, kWidth4x), 56);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kEdr, kWidth4x), 100);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kEdr, kWidth1x), 25);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kHdr, kWidth4x), 200);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kHdr, kWidth2x), 100);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kNdr, kWidth4x), 400);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kQdr, kWidth8x), 80);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kQdr, kWidth12x), 120);
}

TEST(RdmaRateGbpsTest, UnknownCodesGiveZero) {
  EXPECT_DOUBLE_EQ(RdmaRateGbps(0, kWidth4x), 0);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(3, kWidth4x), 0);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kEdr, 0), 0);
  EXPECT_DOUBLE_EQ(RdmaRateGbps(kEdr, 3), 0);
}

TEST(RdmaDevicesTest, DescribeNamesEveryDeviceOrSaysWhyNone) {
  const std::vector<std::string> lines = DescribeRdmaDevices();
  ASSERT_FALSE(lines.empty());
  if (!RdmaSupportBuilt()) {
    EXPECT_TRUE(QueryRdmaDevices().empty());
    EXPECT_TRUE(AnyLineContains(lines, "RDMA devices: not available (built without libibverbs)"));
    return;
  }
  const std::vector<RdmaDeviceInfo> devices = QueryRdmaDevices();
  if (devices.empty()) {
    EXPECT_TRUE(AnyLineContains(lines, "RDMA devices: none (libibverbs lists no device;"));
    EXPECT_TRUE(AnyLineContains(lines, "ibv_devices"));
    return;
  }
  EXPECT_EQ(lines.front(), "RDMA devices (libibverbs):");
  for (const auto& device : devices) {
    EXPECT_TRUE(AnyLineContains(lines, "  " + device.name + " (node GUID 0x")) << device.name;
    EXPECT_EQ(device.node_guid.size(), 18u) << device.node_guid;
    for (const auto& port : device.ports) {
      EXPECT_TRUE(port.link_layer == "InfiniBand" || port.link_layer == "Ethernet")
          << device.name << ":" << port.port << " " << port.link_layer;
    }
  }
}

TEST(RdmaDevicesTest, ActivePortsAreTheActiveOnes) {
  size_t active = 0;
  for (const auto& device : QueryRdmaDevices()) {
    for (const auto& port : device.ports) {
      if (port.state == "ACTIVE") ++active;
    }
  }
  const std::vector<std::string> lines = ActiveRdmaPorts();
  EXPECT_EQ(lines.size(), active);
  for (const auto& line : lines) {
    EXPECT_TRUE(line.find(" Gb/s") != std::string::npos ||
                line.find(" unknown rate") != std::string::npos)
        << line;
  }
}

}  // namespace
}  // namespace cortado::comm
