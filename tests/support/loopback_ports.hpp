// SPDX-License-Identifier: Apache-2.0
// "127.0.0.1:port" addresses whose ports the kernel had free a moment ago, for tests that start
// ranks of the tcp backend (another process could take a port in between; rare enough here).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace cortado::testing {

inline std::vector<std::string> LoopbackPeers(int n) {
  std::vector<std::string> peers;
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    peers.push_back("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
    fds.push_back(fd);  // held until all are chosen, so that they differ
  }
  for (int fd : fds) close(fd);
  return peers;
}

// "a,b,c".
inline std::string JoinPeers(const std::vector<std::string>& peers) {
  std::string joined;
  for (const auto& p : peers) joined += (joined.empty() ? "" : ",") + p;
  return joined;
}

}  // namespace cortado::testing
