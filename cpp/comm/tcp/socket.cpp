// SPDX-License-Identifier: Apache-2.0
#include "comm/tcp/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace cortado::comm {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.Release();
  }
  return *this;
}

int UniqueFd::Release() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::Close() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);  // the descriptor is gone even when close reports EINTR (Linux)
    fd_ = -1;
  }
}

std::string HostPort::ToString() const { return host + ":" + std::to_string(port); }

HostPort ParseHostPort(const std::string& entry, int index) {
  const size_t colon = entry.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == entry.size()) {
    CORTADO_THROW(kInvalidArgument, "peer {} '{}' is not host:port", index, entry);
  }
  HostPort result;
  result.host = entry.substr(0, colon);
  const std::string port = entry.substr(colon + 1);
  if (result.host.find(':') != std::string::npos) {
    CORTADO_THROW(kInvalidArgument, "peer {} '{}': the tcp backend takes IPv4 host:port only",
                  index, entry);
  }
  const bool digits = port.size() <= 5 && std::all_of(port.begin(), port.end(), [](char c) {
                        return std::isdigit(static_cast<unsigned char>(c)) != 0;
                      });
  const int value = digits ? std::stoi(port) : -1;
  if (value < 1 || value > 65535) {
    CORTADO_THROW(kInvalidArgument, "peer {} '{}': '{}' is not a port number (1 to 65535)", index,
                  entry, port);
  }
  result.port = value;
  return result;
}

sockaddr_in ResolveIpv4(const HostPort& address, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(address.host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    CORTADO_THROW(kInvalidArgument, "{}: cannot resolve host '{}' to an IPv4 address ({})", what,
                  address.host, rc != 0 ? gai_strerror(rc) : "no address");
  }
  sockaddr_in addr{};
  std::memcpy(&addr, found->ai_addr, sizeof(addr));
  ::freeaddrinfo(found);
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(address.port));
  return addr;
}

std::string FormatSockaddr(const sockaddr_in& addr) {
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
}

std::string ErrnoText(int err) {
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

bool BothEndsOnOneHost(int fd) {
  sockaddr_in local{}, remote{};
  socklen_t local_len = sizeof(local), remote_len = sizeof(remote);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) {
    return false;
  }
  return local.sin_family == AF_INET && remote.sin_family == AF_INET &&
         local.sin_addr.s_addr == remote.sin_addr.s_addr;
}

void PrepareStreamSocket(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    CORTADO_THROW(kComm, "cannot make a socket nonblocking: {}", ErrnoText(errno));
  }
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    CORTADO_THROW(kComm, "cannot set TCP_NODELAY: {}", ErrnoText(errno));
  }
}

namespace {

int MillisUntil(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  // Round up so that a wait does not end a millisecond early and spin.
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
}

}  // namespace

WaitResult WaitFd(int fd, short events, Clock::time_point deadline, int wake_fd) {
  while (true) {
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int timeout_ms = MillisUntil(deadline);
    const int rc = ::poll(fds, wake_fd >= 0 ? 2 : 1, timeout_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      CORTADO_THROW(kComm, "poll failed: {}", ErrnoText(errno));
    }
    if (wake_fd >= 0 && fds[1].revents != 0) return WaitResult::kWoken;
    if (fds[0].revents != 0) return WaitResult::kReady;
    if (Clock::now() >= deadline) return WaitResult::kTimeout;
  }
}

int SendAllBy(int fd, const void* data, size_t bytes, Clock::time_point deadline, int wake_fd) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    const WaitResult wait = WaitFd(fd, POLLOUT, deadline, wake_fd);
    if (wait == WaitResult::kTimeout) return ETIMEDOUT;
    if (wait == WaitResult::kWoken) return ECANCELED;
  }
  return 0;
}

int RecvAllBy(int fd, void* data, size_t bytes, Clock::time_point deadline, int wake_fd) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return EPIPE;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    const WaitResult wait = WaitFd(fd, POLLIN, deadline, wake_fd);
    if (wait == WaitResult::kTimeout) return ETIMEDOUT;
    if (wait == WaitResult::kWoken) return ECANCELED;
  }
  return 0;
}

namespace {

// One nonblocking connect attempt; returns the connected socket, or an empty one with *err set.
UniqueFd TryConnect(const sockaddr_in& addr, Clock::time_point deadline, int wake_fd, int* err,
                    bool* woken) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *err = errno;
    return {};
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) {
      *err = errno;
      return {};
    }
    const WaitResult wait = WaitFd(fd.get(), POLLOUT, deadline, wake_fd);
    if (wait == WaitResult::kWoken) {
      *woken = true;
      return {};
    }
    if (wait == WaitResult::kTimeout) {
      *err = ETIMEDOUT;
      return {};
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
    if (so_error != 0) {
      *err = so_error;
      return {};
    }
  }
  // Connecting to a loopback port nobody listens on can connect the socket to itself (TCP
  // simultaneous open, when the kernel picks the same ephemeral port); treat it as refused.
  sockaddr_in local{};
  sockaddr_in remote{};
  socklen_t local_len = sizeof(local);
  socklen_t remote_len = sizeof(remote);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_len) == 0 &&
      ::getpeername(fd.get(), reinterpret_cast<sockaddr*>(&remote), &remote_len) == 0 &&
      local.sin_port == remote.sin_port && local.sin_addr.s_addr == remote.sin_addr.s_addr) {
    *err = ECONNREFUSED;
    return {};
  }
  return fd;
}

}  // namespace

UniqueFd ConnectWithRetry(const sockaddr_in& addr, Clock::time_point deadline, double timeout_s,
                          int wake_fd, const std::string& self, const std::string& peer) {
  auto backoff = std::chrono::milliseconds(50);
  int last_error = ETIMEDOUT;
  while (true) {
    bool woken = false;
    int err = 0;
    UniqueFd fd = TryConnect(addr, deadline, wake_fd, &err, &woken);
    if (woken) CORTADO_THROW(kAborted, "{}: aborted while connecting to {}", self, peer);
    if (fd.valid()) {
      PrepareStreamSocket(fd.get());
      return fd;
    }
    last_error = err;
    const auto now = Clock::now();
    if (now >= deadline) break;
    // Sleep the backoff on the wake-up descriptor, so that an abort ends it at once.
    const auto until = std::min(deadline, now + backoff);
    if (wake_fd >= 0 && WaitFd(wake_fd, POLLIN, until, -1) == WaitResult::kReady) {
      CORTADO_THROW(kAborted, "{}: aborted while connecting to {}", self, peer);
    } else if (wake_fd < 0) {
      pollfd none{};
      ::poll(&none, 0, MillisUntil(until));
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  CORTADO_THROW(kTimeout, "{} could not reach {} within {:g} s (last error: {})", self, peer,
                timeout_s, ErrnoText(last_error));
}

}  // namespace cortado::comm
