// SPDX-License-Identifier: Apache-2.0
// The RDMA devices of this host, as rdma-core's libibverbs lists them (what `ibv_devices` and
// `ibstat` show): for `cortado device_query`, and for the Spark driver to see whether a host can
// run `-connection infiniband`. Read-only: nothing here allocates queue pairs or memory regions.
// Built without libibverbs (CORTADO_WITH_IBVERBS 0), every function answers "none"/"not built".
// All functions are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cortado::comm {

struct RdmaPortInfo {
  int port = 0;            // 1-based, as ibverbs numbers ports
  std::string state;       // "ACTIVE", "DOWN", "INIT", "ARMED", "NOP", "ACTIVE_DEFER"
  std::string link_layer;  // "InfiniBand" or "Ethernet" (RoCE)
  double rate_gbps = 0;    // data rate, as ibstat prints it (4x EDR = 100); 0 when unknown
};

struct RdmaDeviceInfo {
  std::string name;       // "mlx5_0"
  std::string node_guid;  // "0x" and 16 hex digits, as ibstat prints it
  std::vector<RdmaPortInfo> ports;
};

// Whether this build has libibverbs (WITH_IBVERBS).
bool RdmaSupportBuilt();

// The RDMA devices and their ports. Empty when the host has none, when the kernel has no RDMA
// support, or without libibverbs; never throws for that. A device that cannot be opened or
// queried is left out, with a warning naming it and the errno text.
std::vector<RdmaDeviceInfo> QueryRdmaDevices();

// The data rate in Gb/s of a port from ibv_port_attr's active_speed and active_width codes, as
// ibstat prints it: lanes (width 1, 2, 4, 8, 16 = 1x, 4x, 8x, 12x, 2x) times the lane rate
// (speed 1 SDR 2.5, 2 DDR 5, 4 QDR 10, 8 FDR10 10, 16 FDR 14, 32 EDR 25, 64 HDR 50, 128 NDR 100).
// E.g. 4x EDR = 100, 4x HDR = 200. 0 for a code it does not know.
double RdmaRateGbps(uint8_t active_speed, uint8_t active_width);

// Lines for `cortado device_query`: "RDMA devices (libibverbs):", then per device
// "  mlx5_0 (node GUID 0x...)" and per port "    port 1: ACTIVE, InfiniBand, 100 Gb/s"; or a
// single line saying that there is none (and what to check), or that the build lacks libibverbs.
std::vector<std::string> DescribeRdmaDevices();

// One line per ACTIVE port, "mlx5_0:1 InfiniBand 100 Gb/s"; empty when there is none.
std::vector<std::string> ActiveRdmaPorts();

}  // namespace cortado::comm
