// SPDX-License-Identifier: Apache-2.0
#include "comm/tcp/ring.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "comm/tcp/socket.hpp"
#include "core/error.hpp"
#include "math/half_host.hpp"

namespace cortado::comm {
namespace {

// Larger pieces gain nothing and cost memory per communicator.
constexpr size_t kMaxChunkBytes = size_t{64} << 20;

// After the last byte moved, both sockets are retried for this long (yielding the core between
// tries) before sleeping in poll. A sleep and a wake-up per piece leave the link idle: with two
// ranks over a 10 Gbit/s link the ring reached 70-76% of the rate sleeping at once and 86-88%
// spinning (bench/RESULTS.md). Retrying send() matters too: poll reports POLLOUT only once half
// of the socket's queue has drained, send() takes bytes as soon as there is room.
constexpr std::chrono::microseconds kSpin(200);

}  // namespace

RingTransfer::RingTransfer(size_t chunk_bytes)
    : staging_(std::clamp<size_t>(chunk_bytes / sizeof(float), 1, kMaxChunkBytes / sizeof(float))),
      staging_bytes_(staging_.size() * sizeof(float)) {}

void RingTransfer::Reset() {
  sends_.clear();
  recvs_.clear();
  on_received_ = nullptr;
}

size_t RingTransfer::Usable(int i) const {
  const size_t k = static_cast<size_t>(i);
  if (k < recv_index_) return recvs_[k].bytes;
  if (k > recv_index_) return 0;
  return recvs_[k].sum ? summed_ : received_;
}

void RingTransfer::Advance() {
  while (recv_index_ < recvs_.size()) {
    const RecvPiece& piece = recvs_[recv_index_];
    if ((piece.sum ? summed_ : received_) < piece.bytes) break;
    if (on_received_) on_received_(recv_index_);
    ++recv_index_;
    received_ = 0;
    summed_ = 0;
  }
  while (send_index_ < sends_.size()) {
    const SendPiece& piece = sends_[send_index_];
    if (sent_ < piece.bytes) break;
    // A piece gated on one not yet complete may still grow (AllGather sizes it on arrival).
    if (piece.gate >= 0 && static_cast<size_t>(piece.gate) >= recv_index_) break;
    ++send_index_;
    sent_ = 0;
  }
}

void RingTransfer::SumStaged() {
  const RecvPiece& piece = recvs_[recv_index_];
  const size_t staged = received_ - summed_;
  const size_t values = staged / WireBytes();
  // data + summed_ is aligned: pieces start on values and summed_ counts whole values.
  if (wire_ == WireType::kFloat32) {
    float* dst = reinterpret_cast<float*>(piece.data + summed_);
    const float* src = staging_.data();
    for (size_t i = 0; i < values; ++i) dst[i] += src[i];
  } else {
    uint16_t* dst = reinterpret_cast<uint16_t*>(piece.data + summed_);
    const float* acc = piece.accumulate + summed_ / sizeof(uint16_t);
    const uint16_t* src = reinterpret_cast<const uint16_t*>(staging_.data());
    if (wire_ == WireType::kBFloat16) {
      for (size_t i = 0; i < values; ++i) {
        dst[i] = math::FloatToBFloat16(acc[i] + math::BFloat16ToFloat(src[i]));
      }
    } else {
      math::AddToFloat16(acc, src, values, dst);
    }
  }
  summed_ += values * WireBytes();
  const size_t rest = staged - values * WireBytes();
  if (rest > 0) {
    // A value split between two reads waits at the front of staging for its other bytes.
    char* bytes = reinterpret_cast<char*>(staging_.data());
    std::memmove(bytes, bytes + values * WireBytes(), rest);
  }
}

void RingTransfer::ThrowClosed(const std::string& peer, int err, const char* op) const {
  if (err == 0 || err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ESHUTDOWN) {
    CORTADO_THROW(kComm, "{} closed the connection during {}{}", peer, op,
                  err == 0 ? "" : " (" + ErrnoText(err) + ")");
  }
  CORTADO_THROW(kComm, "{}: the connection failed during {} ({})", peer, op, ErrnoText(err));
}

namespace {

// The sendable bytes of the current piece: what its gate allows.
size_t Allowed(const RingTransfer::SendPiece& piece, size_t usable) {
  return piece.gate < 0 ? piece.bytes : std::min(piece.bytes, usable);
}

}  // namespace

bool RingTransfer::TrySend(const RingLinks& links, const char* op) {
  const SendPiece& piece = sends_[send_index_];
  const size_t allowed = Allowed(piece, piece.gate < 0 ? 0 : Usable(piece.gate));
  if (allowed <= sent_) return false;
  // At most a chunk per call, so that the receiving socket is served in between (one call of
  // several MiB left the other direction's data waiting: 80% of a 10 Gbit/s link against 86%).
  const ssize_t n = ::send(links.send_fd, piece.data + sent_,
                           std::min(allowed - sent_, staging_bytes_), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    ThrowClosed(links.next, errno, op);
  }
  sent_ += static_cast<size_t>(n);
  return n > 0;
}

bool RingTransfer::TryRecv(const RingLinks& links, const char* op) {
  const RecvPiece& piece = recvs_[recv_index_];
  char* dst;
  size_t want;
  if (piece.sum) {
    const size_t staged = received_ - summed_;
    dst = reinterpret_cast<char*>(staging_.data()) + staged;
    want = std::min(staging_bytes_ - staged, piece.bytes - received_);
  } else {
    dst = piece.data + received_;
    want = std::min(staging_bytes_, piece.bytes - received_);
  }
  if (want == 0) return false;
  const ssize_t n = ::recv(links.recv_fd, dst, want, MSG_DONTWAIT);
  if (n == 0) ThrowClosed(links.prev, 0, op);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    ThrowClosed(links.prev, errno, op);
  }
  received_ += static_cast<size_t>(n);
  if (piece.sum && (received_ - summed_ == staging_bytes_ || received_ == piece.bytes)) {
    SumStaged();
  }
  return true;
}

void RingTransfer::Run(const RingLinks& links, const char* op) {
  send_index_ = sent_ = 0;
  recv_index_ = received_ = summed_ = 0;
  Advance();
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(links.timeout_s));
  auto last_activity = Clock::now();
  // Not waiting once Run ends, however it ends.
  struct WaitReset {
    RingWait* wait;
    ~WaitReset() {
      if (wait != nullptr) wait->since_ns.store(0);
    }
  } wait_reset{links.wait};
  // Whether the last call on each socket could have moved bytes (poll says so, or the last
  // call did not hit EAGAIN): sockets are tried until they would block, then polled.
  bool send_ready = true;
  bool recv_ready = true;
  const bool shared = links.send_fd == links.recv_fd;
  while (send_index_ < sends_.size() || recv_index_ < recvs_.size()) {
    bool moved = false;
    if (send_index_ < sends_.size() && send_ready) {
      if (TrySend(links, op)) {
        moved = true;
      } else {
        const SendPiece& piece = sends_[send_index_];
        // Blocked by the socket, not by the gate: wait for POLLOUT.
        if (Allowed(piece, piece.gate < 0 ? 0 : Usable(piece.gate)) > sent_) send_ready = false;
      }
    }
    if (recv_index_ < recvs_.size() && recv_ready) {
      if (TryRecv(links, op)) {
        moved = true;
      } else {
        recv_ready = false;
      }
    }
    if (moved) {
      Advance();
      last_activity = Clock::now();
      if (links.wait != nullptr) links.wait->since_ns.store(0);
      continue;
    }
    // Nothing arrives for now, but the send stream waits on floats already staged: sum them
    // rather than let the next rank idle until the chunk fills.
    if (send_index_ < sends_.size() && recv_index_ < recvs_.size() &&
        sends_[send_index_].gate == static_cast<int>(recv_index_) && recvs_[recv_index_].sum &&
        received_ - summed_ >= WireBytes() && sent_ >= summed_) {
      SumStaged();
      Advance();
      send_ready = true;
      continue;
    }

    if (Clock::now() - last_activity < kSpin) {
      // Ranks may outnumber the cores: let one that shares this core run meanwhile.
      std::this_thread::yield();
      send_ready = true;
      recv_ready = true;
      continue;
    }
    pollfd fds[3];
    nfds_t count = 0;
    fds[count++] = {links.wake_fd, POLLIN, 0};
    int send_slot = -1;
    int recv_slot = -1;
    if (send_index_ < sends_.size()) {
      // POLLIN on a socket that only sends means the next rank closed it (it never sends on
      // it). A socket that carries both directions (two ranks) is watched for that by its
      // receiving side.
      send_slot = static_cast<int>(count);
      const short closed = shared ? 0 : (POLLIN | POLLRDHUP);
      fds[count++] = {links.send_fd, static_cast<short>(closed | (send_ready ? 0 : POLLOUT)), 0};
    }
    if (recv_index_ < recvs_.size()) {
      recv_slot = static_cast<int>(count);
      fds[count++] = {links.recv_fd, POLLIN, 0};
    }
    const auto now = Clock::now();
    if (now - last_activity >= timeout) {
      if (recv_index_ < recvs_.size()) {
        CORTADO_THROW(kTimeout, "{}: no data for {:g} s during {}", links.prev, links.timeout_s,
                      op);
      }
      CORTADO_THROW(kTimeout, "{} took no data for {:g} s during {}", links.next, links.timeout_s,
                    op);
    }
    if (links.wait != nullptr && links.wait->since_ns.load() == 0) {
      links.wait->op.store(op);
      links.wait->on_prev.store(recv_index_ < recvs_.size());
      links.wait->since_ns.store(
          std::chrono::duration_cast<std::chrono::nanoseconds>(last_activity.time_since_epoch())
              .count());
    }
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(last_activity + timeout - now).count();
    const int rc = ::poll(fds, count, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (rc < 0) {
      if (errno == EINTR) continue;
      CORTADO_THROW(kComm, "poll failed during {}: {}", op, ErrnoText(errno));
    }
    if (fds[0].revents != 0) CORTADO_THROW(kAborted, "aborted during {}", op);
    if (send_slot >= 0 && fds[send_slot].revents != 0) {
      const short revents = fds[send_slot].revents;
      if (!shared && (revents & (POLLIN | POLLRDHUP | POLLERR | POLLHUP))) {
        char byte;
        const ssize_t n = ::recv(links.send_fd, &byte, 1, MSG_DONTWAIT);
        if (n == 0) ThrowClosed(links.next, 0, op);
        if (n > 0) {
          CORTADO_THROW(kComm, "{} sent unexpected data during {} (protocol error)", links.next,
                        op);
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          ThrowClosed(links.next, errno, op);
        }
        if (revents & (POLLERR | POLLHUP)) {
          int err = 0;
          socklen_t len = sizeof(err);
          ::getsockopt(links.send_fd, SOL_SOCKET, SO_ERROR, &err, &len);
          ThrowClosed(links.next, err, op);
        }
      }
      // On a shared socket an error shows in the next send().
      if (revents & (POLLOUT | POLLERR | POLLHUP)) send_ready = true;
    }
    if (recv_slot >= 0 && fds[recv_slot].revents != 0) recv_ready = true;
  }
}

}  // namespace cortado::comm
