// SPDX-License-Identifier: Apache-2.0
#include "comm/rdma_devices.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/config.hpp"
#include "core/logging.hpp"

#if CORTADO_WITH_IBVERBS
#include <endian.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <memory>
#include <system_error>
#endif

namespace cortado::comm {
namespace {

std::string RateText(double gbps) {
  return gbps > 0 ? fmt::format("{} Gb/s", gbps) : std::string("unknown rate");
}

#if CORTADO_WITH_IBVERBS
std::string ErrnoText(int err) { return std::generic_category().message(err); }

struct DeviceListDeleter {
  void operator()(ibv_device** list) const noexcept { ibv_free_device_list(list); }
};
struct ContextDeleter {
  void operator()(ibv_context* context) const noexcept { ibv_close_device(context); }
};

// ibv_port_state_str gives lower-case prose ("active"); ibv_devinfo's names without "PORT_" read
// better next to ibstat's and are what callers compare against.
std::string PortStateName(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
  }
  return fmt::format("UNKNOWN ({})", static_cast<int>(state));
}

// As ibv_devinfo: drivers that predate link_layer leave it unspecified, and they are InfiniBand.
std::string LinkLayerName(uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_UNSPECIFIED:
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    default:
      return fmt::format("unknown link layer {}", link_layer);
  }
}

// Opens and queries one device; false (after a warning naming it) when that fails.
bool QueryDevice(ibv_device* device, RdmaDeviceInfo* info) {
  info->name = ibv_get_device_name(device);
  info->node_guid = fmt::format("0x{:016x}", be64toh(ibv_get_device_guid(device)));
  errno = 0;
  std::unique_ptr<ibv_context, ContextDeleter> context(ibv_open_device(device));
  if (context == nullptr) {
    CORTADO_LOG_WARN("RDMA device {}: cannot open it: {}", info->name, ErrnoText(errno));
    return false;
  }
  ibv_device_attr device_attr{};
  if (const int rc = ibv_query_device(context.get(), &device_attr); rc != 0) {
    CORTADO_LOG_WARN("RDMA device {}: ibv_query_device failed: {}", info->name, ErrnoText(rc));
    return false;
  }
  for (int port = 1; port <= device_attr.phys_port_cnt; ++port) {
    ibv_port_attr port_attr{};
    if (const int rc = ibv_query_port(context.get(), static_cast<uint8_t>(port), &port_attr);
        rc != 0) {
      CORTADO_LOG_WARN("RDMA device {}: ibv_query_port of port {} failed: {}", info->name, port,
                       ErrnoText(rc));
      return false;
    }
    RdmaPortInfo port_info;
    port_info.port = port;
    port_info.state = PortStateName(port_attr.state);
    port_info.link_layer = LinkLayerName(port_attr.link_layer);
    port_info.rate_gbps = RdmaRateGbps(port_attr.active_speed, port_attr.active_width);
    info->ports.push_back(port_info);
  }
  return true;
}
#endif  // CORTADO_WITH_IBVERBS

}  // namespace

bool RdmaSupportBuilt() { return CORTADO_WITH_IBVERBS != 0; }

std::vector<RdmaDeviceInfo> QueryRdmaDevices() {
  std::vector<RdmaDeviceInfo> devices;
#if CORTADO_WITH_IBVERBS
  int count = 0;
  errno = 0;
  std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&count));
  if (list == nullptr) {
    // ENOSYS: the kernel has no RDMA support (no ib_uverbs), the usual case on hosts without a
    // device. Not an error: the answer is "no device".
    CORTADO_LOG_DEBUG("libibverbs lists no RDMA device: {}", ErrnoText(errno));
    return devices;
  }
  for (int i = 0; i < count; ++i) {
    RdmaDeviceInfo info;
    if (QueryDevice(list.get()[i], &info)) devices.push_back(std::move(info));
  }
#endif
  return devices;
}

double RdmaRateGbps(uint8_t active_speed, uint8_t active_width) {
  // Lanes per link, by width code (IBTA PortInfo:LinkWidthActive).
  static constexpr std::pair<uint8_t, int> kLanes[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  // Gb/s per lane, by speed code, as the kernel's sysfs `rate` (which ibstat prints) counts them:
  // the nominal data rates, not the signalling rates (FDR10 10.3125, FDR 14.0625, EDR 25.78125).
  // XDR (200 per lane) needs active_speed_ex, which the rdma-core 44 header lacks and which does
  // not fit this uint8_t.
  static constexpr std::pair<uint8_t, double> kLaneGbps[] = {{1, 2.5},     // SDR
                                                             {2, 5},       // DDR
                                                             {4, 10},      // QDR
                                                             {8, 10},      // FDR10
                                                             {16, 14},     // FDR
                                                             {32, 25},     // EDR
                                                             {64, 50},     // HDR
                                                             {128, 100}};  // NDR
  int lanes = 0;
  for (const auto& [code, n] : kLanes) lanes = code == active_width ? n : lanes;
  double lane_gbps = 0;
  for (const auto& [code, gbps] : kLaneGbps) lane_gbps = code == active_speed ? gbps : lane_gbps;
  return lanes * lane_gbps;
}

std::vector<std::string> DescribeRdmaDevices() {
  if (!RdmaSupportBuilt()) return {"RDMA devices: not available (built without libibverbs)"};
  const std::vector<RdmaDeviceInfo> devices = QueryRdmaDevices();
  if (devices.empty()) {
    return {
        "RDMA devices: none (libibverbs lists no device; -connection infiniband needs one: check "
        "the driver modules, /dev/infiniband and `ibv_devices`)"};
  }
  std::vector<std::string> lines = {"RDMA devices (libibverbs):"};
  for (const auto& device : devices) {
    lines.push_back(fmt::format("  {} (node GUID {})", device.name, device.node_guid));
    for (const auto& port : device.ports) {
      lines.push_back(fmt::format("    port {}: {}, {}, {}", port.port, port.state, port.link_layer,
                                  RateText(port.rate_gbps)));
    }
  }
  return lines;
}

std::vector<std::string> ActiveRdmaPorts() {
  std::vector<std::string> lines;
  for (const auto& device : QueryRdmaDevices()) {
    for (const auto& port : device.ports) {
      if (port.state != "ACTIVE") continue;
      lines.push_back(fmt::format("{}:{} {} {}", device.name, port.port, port.link_layer,
                                  RateText(port.rate_gbps)));
    }
  }
  return lines;
}

}  // namespace cortado::comm
