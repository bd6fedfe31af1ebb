// SPDX-License-Identifier: Apache-2.0
// The socket layer of the tcp backend: an owning file descriptor, "host:port" addresses (IPv4),
// waiting on a descriptor with a deadline and a wake-up descriptor, and connect-with-retry.
// Nothing here keeps global state or touches signals: several communicators may live in one
// process (SIGPIPE is avoided with MSG_NOSIGNAL on every send).
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace cortado::comm {

using Clock = std::chrono::steady_clock;

// A move-only owner of a file descriptor (a socket, an eventfd); closes it when destroyed.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { Close(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  // Gives up ownership: returns the descriptor and leaves this empty.
  int Release() noexcept;
  void Close() noexcept;

 private:
  int fd_ = -1;
};

// One "host:port" entry of CommOptions::peers.
struct HostPort {
  std::string host;
  int port = 0;
  std::string ToString() const;
};

// Parses "host:port" (port 1 to 65535). An entry that is not of that form throws
// kInvalidArgument naming `entry` and `index` (its rank).
HostPort ParseHostPort(const std::string& entry, int index);

// The IPv4 address of `address` (a dotted quad or a hostname, resolved with getaddrinfo).
// kInvalidArgument naming `what` (e.g. "peer 2 'node7:4000'") when the name does not resolve.
sockaddr_in ResolveIpv4(const HostPort& address, const std::string& what);

// "a.b.c.d:port".
std::string FormatSockaddr(const sockaddr_in& addr);

// strerror(err) in lower case ("connection refused"), for messages.
std::string ErrnoText(int err);

// Sets O_NONBLOCK and TCP_NODELAY on a connected TCP socket (kComm on failure).
void PrepareStreamSocket(int fd);

// Whether both ends of a connected TCP socket have the same IPv4 address: the peer runs on this
// machine (loopback, or this machine's own address). Both ends of a connection agree.
bool BothEndsOnOneHost(int fd);

// The result of waiting for a descriptor.
enum class WaitResult { kReady, kTimeout, kWoken };

// Waits until `fd` has one of `events` (poll's POLLIN/POLLOUT; errors and hang-ups count as
// ready), `deadline` passes, or `wake_fd` (when >= 0) becomes readable. EINTR is retried.
WaitResult WaitFd(int fd, short events, Clock::time_point deadline, int wake_fd);

// Sends or receives exactly `bytes` on a nonblocking socket by `deadline`. Returns 0 on success,
// ETIMEDOUT when the deadline passed, ECANCELED when woken, EPIPE for an orderly close by the
// peer (receive), or the socket's errno.
int SendAllBy(int fd, const void* data, size_t bytes, Clock::time_point deadline, int wake_fd);
int RecvAllBy(int fd, void* data, size_t bytes, Clock::time_point deadline, int wake_fd);

// Connects to `addr` (nonblocking, TCP_NODELAY), retrying refused and unreachable attempts
// with a backoff growing from 50 ms to 500 ms until `deadline`. Throws kTimeout
// "rank R could not reach <peer> within Xs (last error: ...)" when the deadline passes, and
// kAborted when `wake_fd` becomes readable. `self` and `peer` name both ends for the message.
UniqueFd ConnectWithRetry(const sockaddr_in& addr, Clock::time_point deadline, double timeout_s,
                          int wake_fd, const std::string& self, const std::string& peer);

}  // namespace cortado::comm
