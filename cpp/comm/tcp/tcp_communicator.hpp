// SPDX-License-Identifier: Apache-2.0
// The tcp backend: the ranks form a ring over TCP sockets. Rank r connects to rank (r + 1) % N
// (its next) and accepts the connection of rank (r - 1 + N) % N (its prev); with N = 2 the pair
// connects both ways, and when the two are on different machines sends the data both ways over
// rank 0's connection (Describe() says so); with N = 1 there are none and every operation is
// trivial. Describe() also says how AllReduce goes (CommOptions::allreduce_algorithm, auto's
// latency_bytes, the hierarchy of hosts), as in
//   tcp: rank 0 of 4; allreduce: auto (a step costs 32 KB)
// The handshake, the wire format and the algorithms are described in tcp_communicator.cpp and
// ring.hpp.
//
// CreateCommunicator({.backend = "tcp", ...}) listens on the port of peers[rank], bound to that
// entry's host address, which must be one of this machine's (never every interface). When the
// ports are not known in advance (Spark: every task opens an ephemeral port, then the tasks
// exchange addresses), open the listener first and hand it over:
//
//   auto listener = TcpListener::Open(my_host, 0);
//   peers = ExchangeAddresses(my_host + ":" + std::to_string(listener->port()));  // caller's
//   auto comm = CreateTcpCommunicator(options_with_peers, std::move(listener));
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "comm/communicator.hpp"
#include "comm/tcp/socket.hpp"

namespace cortado::comm {

// A listening TCP socket, open before the communicator is built (connections that arrive
// early wait in its backlog). Move it into CreateTcpCommunicator, which closes it once the ring
// is connected. Not thread-safe; owns the socket.
class TcpListener {
 public:
  // Listens on `host`:`port`, bound to that address only; host is an IPv4 address or hostname
  // of this machine, the one the other ranks reach it at; port 0 picks a free ephemeral port.
  // kInvalidArgument for a bad host or port, or for 0.0.0.0 (every interface); kComm when the
  // host is not an address of this machine (its name resolves elsewhere: NAT, a container's
  // outside name) or the port cannot be bound (in use).
  static std::unique_ptr<TcpListener> Open(const std::string& host, int port);
  // Listens on `host` at the first port of first_port..last_port that is free (for hosts whose
  // firewalls open a fixed range between the workers); 0..0 is any free ephemeral port, as
  // Open(host, 0). kInvalidArgument for a bad range; kComm naming the range when every port of
  // it is in use, and as Open for the host.
  static std::unique_ptr<TcpListener> OpenInRange(const std::string& host, int first_port,
                                                  int last_port);

  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // The port listened on (the chosen one when opened with port 0).
  int port() const { return port_; }
  // The host it was opened with.
  const std::string& host() const { return host_; }
  // The listening socket (nonblocking); the communicator accepts on it.
  int fd() const { return fd_.get(); }

 private:
  TcpListener(UniqueFd fd, std::string host, int port)
      : fd_(std::move(fd)), host_(std::move(host)), port_(port) {}

  // Open's work; with null_if_in_use, a port that is taken gives null instead of kComm.
  static std::unique_ptr<TcpListener> Bind(const std::string& host, int port, bool null_if_in_use);

  UniqueFd fd_;
  std::string host_;
  int port_;
};

// Builds a tcp communicator that accepts its prev's connection on `listener` (whose port should
// be the one in options.peers[options.rank]); blocks until the ring is connected or
// options.connect_timeout_s has passed (kTimeout naming the rank it could not reach). With one
// rank the listener may be null. kInvalidArgument for bad options (peers not one "host:port" per
// rank, naming the entry and its index); kComm when a peer belongs to another job (it cannot
// prove that it knows options.token; the token itself never travels), has another attempt,
// counts another world size, or claims the wrong rank.
std::unique_ptr<Communicator> CreateTcpCommunicator(const CommOptions& options,
                                                    std::unique_ptr<TcpListener> listener);

// "ring" or "doubling": how a tcp communicator built with `options` moves an AllReduceAs of
// `count` values on `wire` (AllReduce: kFloat32), by CommOptions::allreduce_algorithm and its
// cost model. kInvalidArgument for an unknown allreduce_algorithm.
const char* TcpAllReduceAlgorithm(const CommOptions& options, size_t count, WireType wire);

// The sockets of a tcp communicator's connections: to its next rank and from its prev (one
// socket where a single connection carries both ways; -1 with one rank). A rank whose process
// ends, or whose communicator is aborted or destroyed, closes its ends, so a transport that
// reports no lost peer of its own (shared memory) can watch these for the same ranks: poll for
// POLLRDHUP, never read. Null when `comm` is not a tcp communicator.
struct NeighbourSockets {
  int to_next = -1;
  int from_prev = -1;
};
std::optional<NeighbourSockets> TcpNeighbourSockets(const Communicator& comm);

}  // namespace cortado::comm
