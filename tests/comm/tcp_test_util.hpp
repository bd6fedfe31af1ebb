// SPDX-License-Identifier: Apache-2.0
// Rings of tcp communicators on 127.0.0.1 for the comm tests: every rank's listener is opened
// first on an ephemeral port (no port collisions between parallel test runs), then each rank
// joins with its own listener, in a thread or a forked process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/tcp_communicator.hpp"

namespace cortado::testing {

class LoopbackRing {
 public:
  // `own_addresses`: rank r listens on 127.0.0.(r + 1) rather than every rank on 127.0.0.1, so
  // that each rank's connections look like ones between machines (both ends' addresses differ).
  explicit LoopbackRing(int n, bool own_addresses = false)
      : LoopbackRing(own_addresses ? Each(n) : std::vector<int>(n, 0)) {}
  // Rank r on "host" host_of[r]: it listens on 127.0.0.(host_of[r] + 1), so that ranks of one
  // host share an address and others do not (the tcp backend's hierarchy of hosts).
  explicit LoopbackRing(const std::vector<int>& host_of) {
    for (int h : host_of) {
      const std::string host = "127.0.0." + std::to_string(h + 1);
      listeners_.push_back(comm::TcpListener::Open(host, 0));
      peers_.push_back(host + ":" + std::to_string(listeners_.back()->port()));
    }
  }

  int size() const { return static_cast<int>(peers_.size()); }
  const std::vector<std::string>& peers() const { return peers_; }

  // Options of `rank`: small chunks (many pipelined pieces) and timeouts well above what a
  // healthy test needs.
  comm::CommOptions Options(int rank) const {
    comm::CommOptions options;
    options.rank = rank;
    options.world_size = size();
    options.peers = peers_;
    options.token = "cortado-test";
    options.connect_timeout_s = 10;
    options.timeout_s = 10;
    options.chunk_bytes = 4096;
    return options;
  }

  // Builds rank `options.rank`'s communicator on its listener (each rank's listener is taken
  // once; ranks may join from different threads).
  std::unique_ptr<comm::Communicator> Join(const comm::CommOptions& options) {
    return comm::CreateTcpCommunicator(options, std::move(listeners_[options.rank]));
  }
  std::unique_ptr<comm::Communicator> Join(int rank) { return Join(Options(rank)); }
  // The same through another backend's factory that sets up over the tcp ring:
  // factory(options, listener) -> unique_ptr<Communicator>.
  template <typename Factory>
  std::unique_ptr<comm::Communicator> JoinWith(const comm::CommOptions& options,
                                               Factory&& factory) {
    return factory(options, std::move(listeners_[options.rank]));
  }

  // Closes the listeners not taken (a child process closes the other ranks' copies).
  void CloseOthers(int rank) {
    for (int r = 0; r < size(); ++r) {
      if (r != rank) listeners_[r].reset();
    }
  }

 private:
  static std::vector<int> Each(int n) {
    std::vector<int> hosts(n);
    for (int r = 0; r < n; ++r) hosts[r] = r;
    return hosts;
  }

  std::vector<std::unique_ptr<comm::TcpListener>> listeners_;
  std::vector<std::string> peers_;
};

}  // namespace cortado::testing
