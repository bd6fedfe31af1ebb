// SPDX-License-Identifier: Apache-2.0
// The tcp backend (see tcp_communicator.hpp).
//
// Set-up. Every rank (1) connects to its next, retrying until connect_timeout_s, and sends a
// hello; (2) accepts on its listener until its prev's hello arrives, checks it and answers
// with an accept (or a refusal carrying the reason, and then fails); (3) reads its next's
// answer and checks it the same way (2 and 3 in one poll loop, whichever comes first). Step 1
// needs only the next's listener (the connection waits in its backlog), so no rank waits on
// another in a cycle. Until 2 and 3 are done the listener is watched for a second connection
// claiming the same rank; then it is closed.
//
// A handshake message, integers big-endian:
//   u32 magic "CRTD", u32 version (1), u32 kind (1 hello, 2 accept, 3 refuse), u32 world size,
//   u32 sender's rank, u32 the rank the sender believes it talks to, i32 attempt,
//   u32 token length, u32 message length, token bytes, message bytes (a refusal's reason).
// Both ends check magic, version, token, attempt, world size and both ranks.
//
// Data. After the handshake the sockets carry raw data only, in the order both ends derive
// from the operation (ring.hpp); there are no per-message headers.
//   AllReduce: reduce-scatter then all-gather over N segments of the buffer, 2 (N - 1) steps,
//     each rank sending 2 (N - 1) / N of the buffer. Reduce-scatter step t sends segment
//     (r - t) mod N and adds segment (r - t - 1) mod N from prev into place; all-gather step s
//     sends segment (r + 1 - s) mod N and receives segment (r - s) mod N into place. Each
//     element is summed once, in the order of the ring starting at its segment's first rank,
//     by the rank that then owns it; the all-gather copies those bits to everyone, so the
//     ranks end bit-identical.
//   Broadcast: root sends, every other rank forwards what arrives, except root's prev.
//   AllGather: N - 1 steps; each block travels as a u64 big-endian length and its bytes.
//   Barrier: an AllGather of empty blocks.
#include "comm/tcp/tcp_communicator.hpp"

#include <arpa/inet.h>
#include <endian.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "comm/registry.hpp"
#include "comm/tcp/ring.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"

namespace cortado::comm {

std::unique_ptr<TcpListener> TcpListener::Open(const std::string& host, int port) {
  if (host.empty() || port < 0 || port > 65535) {
    CORTADO_THROW(kInvalidArgument, "cannot listen on '{}:{}': not a host and a port (0 to 65535)",
                  host, port);
  }
  const HostPort address{host, port};
  sockaddr_in addr = ResolveIpv4(address, "listener " + address.ToString());
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) CORTADO_THROW(kComm, "cannot open a socket: {}", ErrnoText(errno));
  // Rebinding a port whose last connections are in TIME_WAIT (a restarted attempt) is fine.
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    if (err == EADDRNOTAVAIL) {
      // The name is not one of this machine's addresses (NAT, containers): listen on all.
      CORTADO_LOG_WARN("{} is not an address of this machine; listening on 0.0.0.0:{}",
                       address.host, port);
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      err =
          ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0 ? 0 : errno;
    }
    if (err != 0) {
      CORTADO_THROW(kComm, "cannot listen on {} ({}): {}", address.ToString(), FormatSockaddr(addr),
                    ErrnoText(err));
    }
  }
  if (::listen(fd.get(), 64) != 0) {
    CORTADO_THROW(kComm, "cannot listen on {}: {}", address.ToString(), ErrnoText(errno));
  }
  socklen_t len = sizeof(addr);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    CORTADO_THROW(kComm, "getsockname on {} failed: {}", address.ToString(), ErrnoText(errno));
  }
  return std::unique_ptr<TcpListener>(new TcpListener(std::move(fd), host, ntohs(addr.sin_port)));
}

namespace {

constexpr uint32_t kMagic = 0x43525444;  // "CRTD"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxHandshakeString = 1 << 20;
constexpr size_t kHeaderBytes = 9 * sizeof(uint32_t);
// The longest a stray connection may keep the acceptor waiting for its hello.
constexpr double kHelloWaitS = 10;

enum Kind : uint32_t { kHello = 1, kAccept = 2, kRefuse = 3 };

struct Handshake {
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t kind = kHello;
  uint32_t world = 0;
  uint32_t from = 0;
  uint32_t to = 0;
  int32_t attempt = 0;
  std::string token;
  std::string message;
};

std::string Encode(const Handshake& h) {
  const uint32_t fields[9] = {h.magic,
                              h.version,
                              h.kind,
                              h.world,
                              h.from,
                              h.to,
                              static_cast<uint32_t>(h.attempt),
                              static_cast<uint32_t>(h.token.size()),
                              static_cast<uint32_t>(h.message.size())};
  std::string bytes(kHeaderBytes, '\0');
  for (int i = 0; i < 9; ++i) {
    const uint32_t be = htonl(fields[i]);
    std::memcpy(&bytes[i * sizeof(uint32_t)], &be, sizeof(be));
  }
  return bytes + h.token + h.message;
}

// Reads one handshake. Returns 0, an errno (ETIMEDOUT, ECANCELED when woken, EPIPE for EOF), or
// EPROTO when the bytes are not a Cortado handshake or speak another version (h->magic and
// h->version say which).
int ReadHandshake(int fd, Clock::time_point deadline, int wake_fd, Handshake* h) {
  char header[kHeaderBytes];
  if (const int err = RecvAllBy(fd, header, sizeof(header), deadline, wake_fd)) return err;
  uint32_t fields[9];
  for (int i = 0; i < 9; ++i) {
    std::memcpy(&fields[i], header + i * sizeof(uint32_t), sizeof(uint32_t));
    fields[i] = ntohl(fields[i]);
  }
  h->magic = fields[0];
  h->version = fields[1];
  if (h->magic != kMagic || h->version != kVersion) return EPROTO;
  h->kind = fields[2];
  h->world = fields[3];
  h->from = fields[4];
  h->to = fields[5];
  h->attempt = static_cast<int32_t>(fields[6]);
  if (fields[7] > kMaxHandshakeString || fields[8] > kMaxHandshakeString) return EPROTO;
  h->token.resize(fields[7]);
  h->message.resize(fields[8]);
  if (const int err = RecvAllBy(fd, h->token.data(), h->token.size(), deadline, wake_fd)) {
    return err;
  }
  return RecvAllBy(fd, h->message.data(), h->message.size(), deadline, wake_fd);
}

std::string PeerAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return FormatSockaddr(addr);
}

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(const CommOptions& options, std::vector<HostPort> peers,
                  std::unique_ptr<TcpListener> listener);

  const char* backend() const override { return "tcp"; }
  void AllReduce(float* data, size_t count) override;
  void Broadcast(void* data, size_t bytes, int root) override;
  std::vector<std::string> AllGather(const std::string& mine) override;
  void Barrier() override;
  void Abort(const std::string& reason) noexcept override;

 private:
  // Set-up (the file comment's steps 1 to 3).
  void Connect(TcpListener* listener);
  // Checks a connection that arrived on the listener; returns true when it is our prev's
  // (then recv_ holds it), false for a stray that is not a Cortado peer; throws for a
  // Cortado peer that does not belong (after telling it why).
  bool HandleIncoming(UniqueFd conn, Clock::time_point deadline);
  // Reads the next rank's answer to our hello and checks it.
  void ReadAnswer(Clock::time_point deadline);
  Handshake Ours(Kind kind, int to) const;

  // Runs an operation's body: rethrows the first error when broken, and breaks the
  // communicator when the body fails.
  template <typename F>
  void Guarded(F&& body);
  [[noreturn]] void Fail(const Error& error);
  void ThrowIfBroken();
  void ShutdownSockets() noexcept;
  // "rank 2 (10.0.0.3:4000)".
  std::string Name(int rank) const;

  std::vector<HostPort> peers_;
  std::string token_;
  int attempt_;
  double connect_timeout_s_;
  int next_;
  int prev_;
  UniqueFd wake_;  // an eventfd, readable once aborted
  UniqueFd send_;  // to next
  UniqueFd recv_;  // from prev
  RingLinks links_;
  RingTransfer transfer_;
  std::vector<uint64_t> lengths_;  // AllGather's block lengths, big-endian

  std::mutex mutex_;  // guards error_
  std::optional<Error> error_;
};

TcpCommunicator::TcpCommunicator(const CommOptions& options, std::vector<HostPort> peers,
                                 std::unique_ptr<TcpListener> listener)
    : Communicator(options.rank, options.world_size),
      peers_(std::move(peers)),
      token_(options.token),
      attempt_(options.attempt),
      connect_timeout_s_(options.connect_timeout_s),
      next_((options.rank + 1) % options.world_size),
      prev_((options.rank - 1 + options.world_size) % options.world_size),
      transfer_(options.chunk_bytes) {
  wake_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_.valid()) CORTADO_THROW(kComm, "eventfd failed: {}", ErrnoText(errno));
  links_.wake_fd = wake_.get();
  links_.timeout_s = options.timeout_s;
  if (size() == 1) return;
  links_.next = Name(next_);
  links_.prev = Name(prev_);
  Connect(listener.get());
  links_.send_fd = send_.get();
  links_.recv_fd = recv_.get();
  CORTADO_LOG_INFO("tcp communicator: rank {} of {}, next {}, prev {}", rank(), size(),
                   peers_[next_].ToString(), peers_[prev_].ToString());
}

std::string TcpCommunicator::Name(int rank) const {
  return fmt::format("rank {} ({})", rank, peers_[rank].ToString());
}

Handshake TcpCommunicator::Ours(Kind kind, int to) const {
  Handshake h;
  h.kind = kind;
  h.world = static_cast<uint32_t>(size());
  h.from = static_cast<uint32_t>(rank());
  h.to = static_cast<uint32_t>(to);
  h.attempt = attempt_;
  h.token = token_;
  return h;
}

void TcpCommunicator::Connect(TcpListener* listener) {
  CORTADO_CHECK(listener != nullptr, "a tcp communicator of {} ranks needs a listener", size());
  if (listener->port() != peers_[rank()].port) {
    CORTADO_LOG_WARN("rank {} listens on port {} but peers[{}] is {}", rank(), listener->port(),
                     rank(), peers_[rank()].ToString());
  }
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(connect_timeout_s_));
  const std::string self = fmt::format("rank {}", rank());
  const std::string next_at = fmt::format("rank {} at {}", next_, peers_[next_].ToString());

  // 1. Connect to the next rank and say hello.
  const sockaddr_in next_addr =
      ResolveIpv4(peers_[next_], fmt::format("peer {} '{}'", next_, peers_[next_].ToString()));
  send_ = ConnectWithRetry(next_addr, deadline, connect_timeout_s_, wake_.get(), self, next_at);
  const std::string hello = Encode(Ours(kHello, next_));
  if (const int err = SendAllBy(send_.get(), hello.data(), hello.size(), deadline, wake_.get())) {
    if (err == ECANCELED) CORTADO_THROW(kAborted, "{}: aborted during set-up", self);
    CORTADO_THROW(kComm, "{}: cannot send the handshake to {} ({})", self, next_at, ErrnoText(err));
  }

  // 2 and 3. Accept the previous rank, and read the next rank's answer as soon as it comes (a
  // refusal, or the next rank closing, ends the set-up at once). The listener stays watched
  // until both are done, for a second connection claiming our prev's rank.
  bool answered = false;
  while (!answered || !recv_.valid()) {
    // After its answer the next rank sends nothing on this socket: POLLIN then means it left.
    pollfd fds[3] = {
        {wake_.get(), POLLIN, 0}, {send_.get(), POLLIN, 0}, {listener->fd(), POLLIN, 0}};
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    const int rc = ::poll(fds, 3, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (rc < 0 && errno != EINTR) CORTADO_THROW(kComm, "poll failed: {}", ErrnoText(errno));
    if (fds[0].revents != 0) CORTADO_THROW(kAborted, "{}: aborted during set-up", self);
    if (fds[1].revents != 0) {
      if (answered) {
        CORTADO_THROW(kComm, "{} closed the connection during set-up", Name(next_));
      }
      ReadAnswer(deadline);
      answered = true;
    }
    if (fds[2].revents != 0) {
      // EAGAIN, ECONNABORTED, ...: nothing to do but wait for the next one.
      UniqueFd conn(::accept4(listener->fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (conn.valid()) HandleIncoming(std::move(conn), deadline);
    }
    if (rc == 0 && Clock::now() >= deadline) {
      if (!recv_.valid()) {
        CORTADO_THROW(kTimeout, "{}: {} did not connect within {:g} s", self, Name(prev_),
                      connect_timeout_s_);
      }
      CORTADO_THROW(kTimeout, "{}: {} did not answer the handshake within {:g} s", self, next_at,
                    connect_timeout_s_);
    }
  }

  // A second connection that claims our prev's rank and is already queued fails the job too.
  while (true) {
    UniqueFd conn(::accept4(listener->fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn.valid()) break;
    HandleIncoming(std::move(conn), std::min(deadline, Clock::now() + std::chrono::seconds(1)));
  }
}

bool TcpCommunicator::HandleIncoming(UniqueFd conn, Clock::time_point deadline) {
  PrepareStreamSocket(conn.get());
  const std::string from = PeerAddress(conn.get());
  Handshake h;
  const auto hello_deadline =
      std::min(deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(kHelloWaitS)));
  const int err = ReadHandshake(conn.get(), hello_deadline, wake_.get(), &h);
  if (err == ECANCELED) CORTADO_THROW(kAborted, "rank {}: aborted during set-up", rank());
  if (err == EPROTO && h.magic == kMagic) {
    CORTADO_THROW(kComm,
                  "a peer at {} speaks the tcp communicator's protocol version {}; rank {} "
                  "speaks version {} (mixed Cortado versions?)",
                  from, h.version, rank(), kVersion);
  }
  if (err != 0 || h.kind != kHello) {
    CORTADO_LOG_WARN("rank {}: ignoring a connection from {} that is not a Cortado peer ({})",
                     rank(), from, err != 0 ? ErrnoText(err) : "not a hello");
    return false;
  }
  const std::string claimed = fmt::format("rank {} at {}", h.from, from);
  std::string why;
  if (h.token != token_) {
    why = fmt::format("{} belongs to another job (token mismatch)", claimed);
  } else if (h.attempt != attempt_) {
    why = fmt::format("attempt mismatch: {} has attempt {}, rank {} has {}", claimed, h.attempt,
                      rank(), attempt_);
  } else if (h.world != static_cast<uint32_t>(size())) {
    why = fmt::format("{} says the world has {} ranks, rank {} has {}", claimed, h.world, rank(),
                      size());
  } else if (h.to != static_cast<uint32_t>(rank())) {
    why = fmt::format("{} believes it connected to rank {}, but {} is rank {}", claimed, h.to,
                      peers_[rank()].ToString(), rank());
  } else if (h.from != static_cast<uint32_t>(prev_)) {
    why = fmt::format("rank {} expected rank {} but rank {} connected from {}", rank(), prev_,
                      h.from, from);
  } else if (recv_.valid()) {
    why = fmt::format("duplicated rank {}: a second connection from {} claims to be rank {}",
                      h.from, from, h.from);
  }
  if (!why.empty()) {
    Handshake refusal = Ours(kRefuse, static_cast<int>(h.from));
    refusal.message = why;
    const std::string bytes = Encode(refusal);
    SendAllBy(conn.get(), bytes.data(), bytes.size(),
              std::min(deadline, Clock::now() + std::chrono::seconds(1)), wake_.get());
    CORTADO_THROW(kComm, "{}", why);
  }
  const std::string accept = Encode(Ours(kAccept, prev_));
  if (const int send_err =
          SendAllBy(conn.get(), accept.data(), accept.size(), deadline, wake_.get())) {
    if (send_err == ECANCELED) CORTADO_THROW(kAborted, "rank {}: aborted during set-up", rank());
    CORTADO_THROW(kComm, "rank {}: cannot answer {}'s handshake ({})", rank(), Name(prev_),
                  ErrnoText(send_err));
  }
  recv_ = std::move(conn);
  return true;
}

void TcpCommunicator::ReadAnswer(Clock::time_point deadline) {
  const std::string next_at = fmt::format("rank {} at {}", next_, peers_[next_].ToString());
  Handshake h;
  const int err = ReadHandshake(send_.get(), deadline, wake_.get(), &h);
  if (err == ECANCELED) CORTADO_THROW(kAborted, "rank {}: aborted during set-up", rank());
  if (err == ETIMEDOUT) {
    CORTADO_THROW(kTimeout, "rank {}: {} did not answer the handshake within {:g} s", rank(),
                  next_at, connect_timeout_s_);
  }
  if (err == EPIPE || err == ECONNRESET) {
    CORTADO_THROW(kComm, "{} closed the connection during set-up", Name(next_));
  }
  if (err == EPROTO && h.magic == kMagic) {
    CORTADO_THROW(kComm,
                  "{} speaks the tcp communicator's protocol version {}; rank {} speaks version "
                  "{} (mixed Cortado versions?)",
                  next_at, h.version, rank(), kVersion);
  }
  if (err != 0) {
    CORTADO_THROW(kComm, "{} is not a Cortado peer ({})", next_at, ErrnoText(err));
  }
  if (h.token != token_) {
    CORTADO_THROW(kComm, "{} belongs to another job (token mismatch)", next_at);
  }
  if (h.attempt != attempt_) {
    CORTADO_THROW(kComm, "attempt mismatch: {} has attempt {}, rank {} has {}", next_at, h.attempt,
                  rank(), attempt_);
  }
  if (h.world != static_cast<uint32_t>(size())) {
    CORTADO_THROW(kComm, "{} says the world has {} ranks, rank {} has {}", next_at, h.world, rank(),
                  size());
  }
  if (h.kind == kRefuse) {
    CORTADO_THROW(kComm, "{} refused the connection: {}", next_at, h.message);
  }
  if (h.kind != kAccept || h.from != static_cast<uint32_t>(next_) ||
      h.to != static_cast<uint32_t>(rank())) {
    CORTADO_THROW(kComm, "rank {} expected rank {} at {} but rank {} answered (for rank {})",
                  rank(), next_, peers_[next_].ToString(), h.from, h.to);
  }
}

template <typename F>
void TcpCommunicator::Guarded(F&& body) {
  ThrowIfBroken();
  try {
    body();
  } catch (const Error& e) {
    Fail(e);
  } catch (const std::bad_alloc&) {
    Fail(Error(ErrorCode::kOutOfMemory, fmt::format("rank {}: out of host memory", rank())));
  } catch (const std::exception& e) {
    Fail(Error(ErrorCode::kInternal, e.what()));
  }
}

void TcpCommunicator::ThrowIfBroken() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) throw *error_;
}

void TcpCommunicator::Fail(const Error& error) {
  std::optional<Error> first;
  bool was_broken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    was_broken = error_.has_value();
    if (!was_broken) error_ = error;
    first = error_;
  }
  ShutdownSockets();
  if (!was_broken) {
    CORTADO_LOG_WARN("tcp communicator rank {} is broken: {}", rank(), error.what());
  }
  throw *first;
}

void TcpCommunicator::ShutdownSockets() noexcept {
  // Shut down, not closed: another thread may be polling them (Abort), and the descriptors
  // must not be reused under it. The peers see the connections end at once.
  if (send_.valid()) ::shutdown(send_.get(), SHUT_RDWR);
  if (recv_.valid()) ::shutdown(recv_.get(), SHUT_RDWR);
}

void TcpCommunicator::Abort(const std::string& reason) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) {
      error_.emplace(ErrorCode::kAborted, "communicator aborted: " + reason, __FILE__, __LINE__);
    }
  } catch (...) {
    // Out of memory for the message: the wake-up below still ends the blocked call.
  }
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  ShutdownSockets();
}

void TcpCommunicator::AllReduce(float* data, size_t count) {
  Guarded([&] {
    const int n = size();
    if (n == 1 || count == 0) return;
    const int r = rank();
    const RingSegments segments(count, n);
    auto at = [&](int i) { return reinterpret_cast<char*>(data + segments.begin(i)); };
    auto bytes = [&](int i) { return segments.size(i) * sizeof(float); };
    auto mod = [n](int i) { return ((i % n) + n) % n; };
    transfer_.Reset();
    auto& sends = transfer_.sends();
    auto& recvs = transfer_.recvs();
    // Send piece k is gated on received piece k - 1: the segment received at one step is the
    // one sent at the next.
    for (int t = 0; t < n - 1; ++t) {  // reduce-scatter
      const int out = mod(r - t);
      const int in = mod(r - t - 1);
      sends.push_back({at(out), bytes(out), t - 1});
      recvs.push_back({at(in), bytes(in), /*sum=*/true});
    }
    for (int s = 0; s < n - 1; ++s) {  // all-gather
      const int out = mod(r + 1 - s);
      const int in = mod(r - s);
      sends.push_back({at(out), bytes(out), n - 1 + s - 1});
      recvs.push_back({at(in), bytes(in), /*sum=*/false});
    }
    transfer_.Run(links_, "allreduce");
  });
}

void TcpCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size()) {
    CORTADO_THROW(kInvalidArgument, "broadcast from rank {}, outside a world of {} ranks", root,
                  size());
  }
  Guarded([&] {
    const int n = size();
    if (n == 1 || bytes == 0) return;
    const int position = (rank() - root + n) % n;  // along the ring from root
    char* p = static_cast<char*>(data);
    transfer_.Reset();
    if (position == 0) {
      transfer_.sends().push_back({p, bytes, -1});
    } else {
      transfer_.recvs().push_back({p, bytes, /*sum=*/false});
      // Forward each piece as it arrives, except at the end of the ring.
      if (position != n - 1) transfer_.sends().push_back({p, bytes, 0});
    }
    transfer_.Run(links_, "broadcast");
  });
}

std::vector<std::string> TcpCommunicator::AllGather(const std::string& mine) {
  std::vector<std::string> blocks(size());
  Guarded([&] {
    const int n = size();
    const int r = rank();
    blocks[r] = mine;
    if (n == 1) return;
    auto mod = [n](int i) { return ((i % n) + n) % n; };
    lengths_.assign(n, 0);
    lengths_[r] = htobe64(static_cast<uint64_t>(mine.size()));
    transfer_.Reset();
    auto& sends = transfer_.sends();
    auto& recvs = transfer_.recvs();
    auto length_at = [&](int i) { return reinterpret_cast<char*>(&lengths_[i]); };
    // Step k receives block (r - k - 1) as pieces 2k (its length) and 2k + 1 (its bytes, sized
    // when the length arrives), and sends the block received at step k - 1.
    for (int k = 0; k < n - 1; ++k) {
      const int in = mod(r - k - 1);
      recvs.push_back({length_at(in), sizeof(uint64_t), false});
      recvs.push_back({nullptr, 0, false});
      if (k == 0) {
        sends.push_back({length_at(r), sizeof(uint64_t), -1});
        sends.push_back({blocks[r].data(), blocks[r].size(), -1});
      } else {
        sends.push_back({length_at(mod(r - k)), sizeof(uint64_t), 2 * (k - 1)});
        sends.push_back({nullptr, 0, 2 * (k - 1) + 1});
      }
    }
    transfer_.set_on_received([&](size_t piece) {
      if (piece % 2 != 0) return;
      const int k = static_cast<int>(piece / 2);
      const int in = mod(r - k - 1);
      const uint64_t length = be64toh(lengths_[in]);
      if (length > (uint64_t{1} << 40)) {
        CORTADO_THROW(kComm, "{} sent a block of {} bytes during allgather (protocol error)",
                      links_.prev, length);
      }
      blocks[in].resize(static_cast<size_t>(length));
      recvs[piece + 1] = {blocks[in].data(), blocks[in].size(), false};
      if (k + 1 < n - 1) sends[piece + 3] = {blocks[in].data(), blocks[in].size(), 2 * k + 1};
    });
    transfer_.Run(links_, "allgather");
  });
  return blocks;
}

void TcpCommunicator::Barrier() {
  Guarded([&] {
    if (size() == 1) return;
    // An AllGather of empty blocks: every rank's block leaves only once it has entered.
    lengths_.assign(size(), 0);
    transfer_.Reset();
    const int n = size();
    const int r = rank();
    auto mod = [n](int i) { return ((i % n) + n) % n; };
    for (int k = 0; k < n - 1; ++k) {
      transfer_.recvs().push_back(
          {reinterpret_cast<char*>(&lengths_[mod(r - k - 1)]), sizeof(uint64_t), false});
      transfer_.sends().push_back(
          {reinterpret_cast<char*>(&lengths_[mod(r - k)]), sizeof(uint64_t), k - 1});
    }
    transfer_.Run(links_, "barrier");
    for (int i = 0; i < n; ++i) {
      if (lengths_[i] != 0) {
        CORTADO_THROW(kComm, "{} is not in a barrier (it sent data during barrier)", links_.prev);
      }
    }
  });
}

std::unique_ptr<Communicator> CreateFromOptions(const CommOptions& options) {
  return CreateTcpCommunicator(options, nullptr);
}

}  // namespace

std::unique_ptr<Communicator> CreateTcpCommunicator(const CommOptions& options,
                                                    std::unique_ptr<TcpListener> listener) {
  const int n = options.world_size;
  if (n < 1 || options.rank < 0 || options.rank >= n) {
    CORTADO_THROW(kInvalidArgument, "rank {} is outside a world of {} ranks", options.rank, n);
  }
  if (!(options.timeout_s > 0) || !(options.connect_timeout_s > 0)) {
    CORTADO_THROW(kInvalidArgument,
                  "tcp: timeout_s ({}) and connect_timeout_s ({}) must be positive",
                  options.timeout_s, options.connect_timeout_s);
  }
  if (options.chunk_bytes < sizeof(float)) {
    CORTADO_THROW(kInvalidArgument, "tcp: chunk_bytes ({}) must be at least {}",
                  options.chunk_bytes, sizeof(float));
  }
  if (n > 1 && static_cast<int>(options.peers.size()) != n) {
    CORTADO_THROW(kInvalidArgument,
                  "tcp: peers names {} address{} but the world has {} ranks: give host:port of "
                  "every rank, in rank order",
                  options.peers.size(), options.peers.size() == 1 ? "" : "es", n);
  }
  std::vector<HostPort> peers;
  for (size_t i = 0; i < options.peers.size(); ++i) {
    peers.push_back(ParseHostPort(options.peers[i], static_cast<int>(i)));
  }
  if (n > 1 && listener == nullptr) {
    const HostPort& own = peers[options.rank];
    listener = WithContext(fmt::format("rank {}", options.rank),
                           [&] { return TcpListener::Open(own.host, own.port); });
  }
  return std::make_unique<TcpCommunicator>(options, std::move(peers), std::move(listener));
}

CORTADO_REGISTER_COMMUNICATOR(tcp, CreateFromOptions);

}  // namespace cortado::comm
