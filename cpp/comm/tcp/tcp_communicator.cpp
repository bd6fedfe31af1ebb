// SPDX-License-Identifier: Apache-2.0
// The tcp backend (see tcp_communicator.hpp).
//
// Set-up. Every rank (1) connects to its next, retrying until connect_timeout_s, and sends a
// hello; (2) takes the connections that arrive on its listener and runs the acceptor's side of
// the handshake with each until one proves it is its prev; (3) runs the connector's side with
// its next. 2 and 3 run in one poll loop, each connection advancing when its peer's message
// arrives, so no rank waits on another in a cycle (step 1 needs only the next's listener: the
// connection waits in its backlog). Until 2 and 3 are done the listener is watched for a second
// connection claiming the same rank; then it is closed.
//
// The handshake proves to both ends that the other knows the job's token without sending it:
// the token is the key of HMAC-SHA256 over both ends' fresh random nonces and fields, so what
// travels is useless to another job, and a recorded handshake cannot be replayed (the other
// end's nonce differs next time). The token itself never leaves the process.
//   connector -> acceptor  hello:   fields, nonce_c
//   acceptor -> connector  accept:  fields, nonce_a,
//                                   MAC_a = HMAC(token, "cortado-tcp accept" | H | A)
//   connector -> acceptor  confirm: fields, MAC_c = HMAC(token, "cortado-tcp connect" | H | A)
//   acceptor -> connector  ready (or refuse, with the reason)
// where H and A are the hello's and the accept's fields and nonces as on the wire (the first 28
// and the next 16 bytes of each message below). The connector checks MAC_a (constant time)
// before it sends MAC_c; a bad MAC_a is "belongs to another job (token mismatch)", and it tells
// the acceptor so with a refusal. The acceptor checks MAC_c, then the attempt, world size, both
// ranks and that no other connection already holds its prev's place, and answers ready or a
// refusal naming what differs; the connector checks the accept's attempt and world size itself.
// A connection that does not speak this (no hello within 10 s, another magic) is dropped, and
// the first one of a set-up is logged.
//
// A handshake message, integers big-endian, 80 bytes and then the message:
//   u32 magic "CRTD", u32 version (2), u32 kind (1 hello, 2 accept, 3 refuse, 4 confirm,
//   5 ready), u32 world size, u32 sender's rank, u32 the rank the sender believes it talks to,
//   i32 attempt, u32 message length (at most 4 KiB; only a refusal has one), 16 bytes nonce
//   (hello, accept; zeros otherwise), 32 bytes MAC (accept, confirm; zeros otherwise), message
//   bytes (a refusal's reason). Magic and version are read first, so a peer of another version
//   is named as such.
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
//   AllReduce by recursive doubling (CommOptions::allreduce_algorithm; small buffers): with p the
//     largest power of two not above N, rank r >= p first hands its buffer to rank r - p, which
//     adds it; then at level k = 0, 1, ... each rank r < p swaps its whole buffer with rank
//     r ^ 2^k and adds the partner's to its own; finally rank r - p sends the sum back. Each
//     pair has a two-rank tcp communicator of its own (its own listener, port sent round the
//     ring once, token "<token>/doubling"), made with the ring; a swap is one transfer each way
//     on it, raw float32 values (both ends know the size). With two ranks the ring's own
//     connections carry the swap. Float addition is commutative, so both ends of a swap hold
//     the same bits after it, and every rank ends bit-identical; the order of the additions is
//     not the ring's, so the two algorithms agree to float rounding, not bit for bit.
//   AllReduce by recursive halving then doubling (large buffers on many ranks), over the same
//     pairs and fold: at level k the two partners split the part they share, each sending the
//     half the other keeps and adding the other's copy of its own half as it arrives; after the
//     last level each rank holds the sum of 1/p of the buffer, and the levels in reverse gather
//     the parts back. Each element is added in the same tree as by doubling, so the two give the
//     same bits in float32. On a 16-bit wire (AllReduceAs) the halves go as wire values: each
//     level adds the partner's rounded partial sum to the keeper's float32 one and rounds the
//     sum, which the next level sends on (log2 p roundings per element, where the ring has one
//     per step and doubling, which stays float32, one at the end); the fold stays float32.
//   AllReduce across hosts (CommOptions::hierarchical, where ranks share hosts and there are
//     two hosts or more): the ranks of each host (by the host of their peers entries) form a
//     ring of their own, and the first rank of each host a ring of the hosts (with recursive
//     doubling and halving as above where faster); a call sums within each host, then across the
//     hosts, then each host's first rank broadcasts the sum to its host. Made, like the pairs,
//     while the communicator is built (ports sent round the ring once; tokens "<token>/host"
//     and "<token>/hosts"). Every rank ends with its host's first rank's bits, which are the
//     same on every host.
//   Broadcast: root sends, every other rank forwards what arrives, except root's prev.
//   AllGather: N - 1 steps; each block travels as a u64 big-endian length and its bytes.
//   Barrier: an AllGather of empty blocks.
#include "comm/tcp/tcp_communicator.hpp"

#include <arpa/inet.h>
#include <endian.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/recursive.hpp"
#include "comm/registry.hpp"
#include "comm/tcp/ring.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "core/sha256.hpp"
#include "math/half_host.hpp"

namespace cortado::comm {

std::unique_ptr<TcpListener> TcpListener::Open(const std::string& host, int port) {
  if (host.empty() || port < 0 || port > 65535) {
    CORTADO_THROW(kInvalidArgument, "cannot listen on '{}:{}': not a host and a port (0 to 65535)",
                  host, port);
  }
  return Bind(host, port, /*null_if_in_use=*/false);
}

std::unique_ptr<TcpListener> TcpListener::OpenInRange(const std::string& host, int first_port,
                                                      int last_port) {
  if (first_port == 0 && last_port == 0) return Open(host, 0);
  if (host.empty() || first_port < 1 || last_port > 65535 || first_port > last_port) {
    CORTADO_THROW(kInvalidArgument,
                  "cannot listen on '{}' in the ports {}-{}: not a host and a range of ports "
                  "(1 to 65535, the first no larger than the last)",
                  host, first_port, last_port);
  }
  for (int port = first_port; port <= last_port; ++port) {
    auto listener = Bind(host, port, /*null_if_in_use=*/true);
    if (listener) return listener;
  }
  CORTADO_THROW(kComm,
                "cannot listen on {}: every port of {}-{} is in use (other workers or programs on "
                "this host hold them); widen the range, or free some of its ports",
                host, first_port, last_port);
}

std::unique_ptr<TcpListener> TcpListener::Bind(const std::string& host, int port,
                                               bool null_if_in_use) {
  const HostPort address{host, port};
  sockaddr_in addr = ResolveIpv4(address, "listener " + address.ToString());
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) CORTADO_THROW(kComm, "cannot open a socket: {}", ErrnoText(errno));
  // Rebinding a port whose last connections are in TIME_WAIT (a restarted attempt) is fine.
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // Listening on every interface would take connections from networks the job does not use;
  // the host must be the address the other ranks reach this one at.
  char ip[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
  if (addr.sin_addr.s_addr == htonl(INADDR_ANY)) {
    CORTADO_THROW(kInvalidArgument,
                  "cannot listen on {}: {} is every interface, not an address of this machine; "
                  "give one of this machine's own addresses",
                  address.ToString(), ip);
  }
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    if (err == EADDRNOTAVAIL) {
      CORTADO_THROW(kComm,
                    "cannot listen on {}: {} is not an address of this machine; give one of this "
                    "machine's own addresses (the one the other ranks reach it at)",
                    address.ToString(), ip);
    }
    if (err == EADDRINUSE && null_if_in_use) return nullptr;
    CORTADO_THROW(kComm, "cannot listen on {} ({}): {}", address.ToString(), FormatSockaddr(addr),
                  ErrnoText(err));
  }
  if (::listen(fd.get(), 64) != 0) {
    const int err = errno;
    // Two sockets may bind one port with SO_REUSEADDR while neither listens; the second
    // listen() then fails with EADDRINUSE.
    if (err == EADDRINUSE && null_if_in_use) return nullptr;
    CORTADO_THROW(kComm, "cannot listen on {}: {}", address.ToString(), ErrnoText(err));
  }
  socklen_t len = sizeof(addr);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    CORTADO_THROW(kComm, "getsockname on {} failed: {}", address.ToString(), ErrnoText(errno));
  }
  return std::unique_ptr<TcpListener>(new TcpListener(std::move(fd), host, ntohs(addr.sin_port)));
}

namespace {

constexpr uint32_t kMagic = 0x43525444;  // "CRTD"
constexpr uint32_t kVersion = 2;
// A refusal's reason is a sentence; nothing else has a message.
constexpr uint32_t kMaxHandshakeString = 4096;
constexpr size_t kNonceBytes = 16;
constexpr size_t kFieldBytes = 7 * sizeof(uint32_t);  // magic to attempt: what the MACs cover
constexpr size_t kFixedBytes = kFieldBytes + sizeof(uint32_t) + kNonceBytes + 32;
// The longest a stray connection may keep the acceptor waiting for its hello, and the longest
// one message may take to arrive once it has begun.
constexpr double kHelloWaitS = 10;
// Connections whose handshake is under way at once; more are dropped as they arrive.
constexpr size_t kMaxPending = 16;

constexpr std::string_view kAcceptLabel = "cortado-tcp accept";
constexpr std::string_view kConnectLabel = "cortado-tcp connect";

enum Kind : uint32_t { kHello = 1, kAccept = 2, kRefuse = 3, kConfirm = 4, kReady = 5 };

using Nonce = std::array<uint8_t, kNonceBytes>;

struct Handshake {
  uint32_t magic = kMagic;
  uint32_t version = kVersion;
  uint32_t kind = kHello;
  uint32_t world = 0;
  uint32_t from = 0;
  uint32_t to = 0;
  int32_t attempt = 0;
  Nonce nonce{};
  Sha256Digest mac{};
  std::string message;
};

void PutU32(uint32_t value, char* at) {
  const uint32_t be = htonl(value);
  std::memcpy(at, &be, sizeof(be));
}

uint32_t GetU32(const char* at) {
  uint32_t be;
  std::memcpy(&be, at, sizeof(be));
  return ntohl(be);
}

// The fields and nonce of `h` as on the wire: what the MACs cover.
std::string Fields(const Handshake& h) {
  const uint32_t fields[7] = {
      h.magic, h.version, h.kind, h.world, h.from, h.to, static_cast<uint32_t>(h.attempt)};
  std::string bytes(kFieldBytes + kNonceBytes, '\0');
  for (int i = 0; i < 7; ++i) PutU32(fields[i], &bytes[i * sizeof(uint32_t)]);
  std::memcpy(&bytes[kFieldBytes], h.nonce.data(), kNonceBytes);
  return bytes;
}

std::string Encode(const Handshake& h) {
  std::string bytes = Fields(h);
  bytes.insert(kFieldBytes, sizeof(uint32_t), '\0');
  PutU32(static_cast<uint32_t>(h.message.size()), &bytes[kFieldBytes]);
  bytes.append(reinterpret_cast<const char*>(h.mac.data()), h.mac.size());
  return bytes + h.message;
}

// MAC_a (kAcceptLabel) or MAC_c (kConnectLabel) of a hello and its accept under `token`.
Sha256Digest HandshakeMac(const std::string& token, std::string_view label, const Handshake& hello,
                          const Handshake& accept) {
  std::string covered(label);
  covered += Fields(hello);
  covered += Fields(accept);
  return HmacSha256(token, covered);
}

Nonce FreshNonce() {
  Nonce nonce;
  size_t filled = 0;
  while (filled < nonce.size()) {
    const ssize_t n = ::getrandom(nonce.data() + filled, nonce.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) CORTADO_THROW(kComm, "cannot draw a random nonce: {}", ErrnoText(errno));
    filled += static_cast<size_t>(n);
  }
  return nonce;
}

// Reads one handshake. Returns 0, an errno (ETIMEDOUT, ECANCELED when woken, EPIPE for EOF), or
// EPROTO when the bytes are not a Cortado handshake or speak another version (h->magic and
// h->version say which).
int ReadHandshake(int fd, Clock::time_point deadline, int wake_fd, Handshake* h) {
  char fixed[kFixedBytes];
  // Magic and version first: a peer of another version may send fewer bytes than ours.
  if (const int err = RecvAllBy(fd, fixed, 8, deadline, wake_fd)) return err;
  h->magic = GetU32(fixed);
  h->version = GetU32(fixed + 4);
  if (h->magic != kMagic || h->version != kVersion) return EPROTO;
  if (const int err = RecvAllBy(fd, fixed + 8, kFixedBytes - 8, deadline, wake_fd)) return err;
  h->kind = GetU32(fixed + 8);
  h->world = GetU32(fixed + 12);
  h->from = GetU32(fixed + 16);
  h->to = GetU32(fixed + 20);
  h->attempt = static_cast<int32_t>(GetU32(fixed + 24));
  const uint32_t length = GetU32(fixed + kFieldBytes);
  std::memcpy(h->nonce.data(), fixed + kFieldBytes + 4, kNonceBytes);
  std::memcpy(h->mac.data(), fixed + kFieldBytes + 4 + kNonceBytes, h->mac.size());
  if (length > kMaxHandshakeString) return EPROTO;
  h->message.resize(length);
  return RecvAllBy(fd, h->message.data(), h->message.size(), deadline, wake_fd);
}

bool MacMatches(const Sha256Digest& expected, const Sha256Digest& got) {
  return ConstantTimeEqual(expected.data(), got.data(), expected.size());
}

std::string PeerAddress(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  return FormatSockaddr(addr);
}

Clock::time_point SecondsFromNow(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The pieces of one rank's ring AllReduce (see the file comment) over segments at(i) of
// bytes(i) bytes: reduce-scatter step t sends segment (r - t) mod n and sums segment
// (r - t - 1) mod n into place (with accumulate(i), for a 16-bit wire: RingTransfer::RecvPiece),
// all-gather step s sends segment (r + 1 - s) mod n and copies (r - s) mod n. Send piece k is
// gated on received piece k - 1: the segment received at one step is the one sent at the next.
template <typename At, typename Bytes, typename Accumulate>
void AddAllReducePieces(RingTransfer* transfer, int n, int r, const At& at, const Bytes& bytes,
                        const Accumulate& accumulate) {
  auto mod = [n](int i) { return ((i % n) + n) % n; };
  for (int t = 0; t < n - 1; ++t) {  // reduce-scatter
    const int out = mod(r - t);
    const int in = mod(r - t - 1);
    transfer->sends().push_back({at(out), bytes(out), t - 1});
    transfer->recvs().push_back({at(in), bytes(in), /*sum=*/true, accumulate(in)});
  }
  for (int s = 0; s < n - 1; ++s) {  // all-gather
    const int out = mod(r + 1 - s);
    const int in = mod(r - s);
    transfer->sends().push_back({at(out), bytes(out), n - 1 + s - 1});
    transfer->recvs().push_back({at(in), bytes(in), /*sum=*/false});
  }
}

class TcpCommunicator final : public Communicator, private PairExchange {
 public:
  // `part`: part of another communicator (a pair of MakeDoublingLinks, a ring of
  // MakeHierarchy), which speaks for it: it logs nothing when built.
  TcpCommunicator(const CommOptions& options, std::vector<HostPort> peers,
                  std::unique_ptr<TcpListener> listener, bool part = false);

  const char* backend() const override { return "tcp"; }
  std::string Describe() const override {
    std::string line =
        Communicator::Describe() + (shared_connection_ ? ", one connection both ways" : "");
    if (size() > 1) line += "; allreduce: " + DescribeAllReduce();
    return line;
  }
  void AllReduce(float* data, size_t count) override;
  void AllReduceAs(float* data, size_t count, WireType wire) override;
  bool SupportsWire(WireType /*wire*/) const override { return true; }
  void Broadcast(void* data, size_t bytes, int root) override;
  std::vector<std::string> AllGather(const std::string& mine) override;
  void Barrier() override;
  void Abort(const std::string& reason) noexcept override;
  NeighbourSockets Sockets() const { return {links_.send_fd, links_.recv_fd}; }
  std::string WaitingOn(double min_seconds) const override {
    // A swap of recursive doubling waits on a pair's connections.
    for (const auto& level : levels_) {
      if (std::string waiting = level->WaitingOn(min_seconds); !waiting.empty()) return waiting;
    }
    for (const TcpCommunicator* sub : {fold_.get(), host_.get(), hosts_.get()}) {
      if (sub == nullptr) continue;
      if (std::string waiting = sub->WaitingOn(min_seconds); !waiting.empty()) return waiting;
    }
    const int64_t since = wait_.since_ns.load();
    if (since == 0) return {};
    const int64_t now =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    const double seconds = static_cast<double>(now - since) / 1e9;
    if (seconds < min_seconds) return {};
    return wait_.on_prev.load() ? fmt::format("{:.0f} s for data from {} during {}", seconds,
                                              links_.prev, wait_.op.load())
                                : fmt::format("{:.0f} s for {} to take data during {}", seconds,
                                              links_.next, wait_.op.load());
  }

 private:
  // A connection that arrived on the listener, its handshake under way.
  struct Incoming {
    UniqueFd fd;
    std::string address;             // the peer's host:port
    Clock::time_point hello_by;      // dropped if no hello came by then
    std::optional<Handshake> hello;  // set once answered with an accept
    Handshake accept;
  };
  enum class Outgoing { kAwaitAccept, kAwaitVerdict, kDone };
  enum class Step { kKeep, kDrop, kPrev };

  // Set-up (the file comment's steps 1 to 3).
  void Connect(TcpListener* listener);
  // Advances the handshake of a connection whose next message has begun to arrive: answers a
  // hello with an accept; checks a confirm. kPrev once it proved to be our prev (then recv_
  // holds it), kDrop for a stray that is not a Cortado peer; throws for a Cortado peer that
  // does not belong (after telling it why).
  Step AdvanceIncoming(Incoming* in, Clock::time_point deadline);
  // The connector's side: reads the next rank's accept, checks it and sends the confirm; then
  // reads its verdict.
  void ReadAccept(Clock::time_point deadline);
  void ReadVerdict(Clock::time_point deadline);
  // Reads a message from the next rank, turning errors into exceptions.
  Handshake ReadFromNext(Clock::time_point deadline);
  // Sends a refusal with `why` and does not wait to see it arrive.
  void Refuse(int fd, int to, const std::string& why, Clock::time_point deadline);
  void LogStray(const std::string& address, const std::string& why);
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

  // Recursive doubling: the pair communicators (file comment), made by the constructor.
  void MakeDoublingLinks(const CommOptions& options);
  // How an allreduce that moves ring_bytes by the ring (its wire values) and float32_bytes by
  // doubling or halving goes (Choose).
  Algorithm ChooseFor(size_t ring_bytes, size_t float32_bytes) const;
  // PairExchange: level k's pair (over the ring's own connections on two ranks), or the fold's.
  void ExchangeWith(int level, const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                    bool sum, WireType wire, const float* accumulate) override;
  // Entry `index` of rank q's comma-separated port list (sent round the ring when the pairs and
  // rings are made); kComm naming q and `what` the port is for when it is not a port number.
  int AnnouncedPort(int q, const std::string& list, size_t index, const std::string& what) const;
  // One transfer with this communicator's other rank (a communicator of two ranks): sends
  // send_bytes from `send` and receives recv_bytes into `recv` (0: none), the received floats
  // added into `recv` when `sum` (it must not overlap `send`); errors say "during allreduce".
  // On a 16-bit `wire` both buffers hold wire values and a summed receive writes the rounded
  // sum of each received value and the float32 at the same place in `accumulate`.
  void Exchange(const void* send, size_t send_bytes, void* recv, size_t recv_bytes, bool sum,
                WireType wire = WireType::kFloat32, const float* accumulate = nullptr);

  // The hierarchy of hosts (CommOptions::hierarchical): false when the ranks do not share hosts
  // or all share one (then nothing is made).
  bool MakeHierarchy(const CommOptions& options);
  // AllReduceAs through it: within the host, between the hosts (on `wire`), back to the host.
  void Hierarchical(float* data, size_t count, WireType wire);
  // How AllReduce goes, for Describe(): the algorithm it was built with (CommOptions::
  // allreduce_algorithm's name; halving on two ranks runs the ring's steps), auto with its step
  // cost, and within the hierarchy of hosts where there is one ("doubling", "auto (a step costs
  // 32 KB)", "within each host by the ring, between the 2 hosts by doubling").
  std::string DescribeAllReduce() const;

  bool part_ = false;  // part of another communicator (the constructor's `part`)
  std::unique_ptr<TcpCommunicator> host_;   // this host's ranks (null when it is alone)
  std::unique_ptr<TcpCommunicator> hosts_;  // every host's first rank (null elsewhere)
  Algorithm algorithm_ = Algorithm::kRing;
  size_t latency_bytes_ = 0;
  size_t doubling_max_bytes_ = 0;
  int power_ = 1;       // the largest power of two not above size()
  int host_count_ = 0;  // hosts of the hierarchy (MakeHierarchy); 0 when there is none
  std::vector<std::unique_ptr<TcpCommunicator>> levels_;  // below power_: level k's pair
  std::unique_ptr<TcpCommunicator> fold_;                 // with rank r + power_ or r - power_
  std::vector<float> theirs_;                             // a partner's buffer
  std::vector<HostPort> peers_;
  std::vector<std::string> rank_names_;
  std::string token_;
  int attempt_;
  double connect_timeout_s_;
  int next_;
  int prev_;
  UniqueFd wake_;  // an eventfd, readable once aborted
  UniqueFd send_;  // to next
  UniqueFd recv_;  // from prev
  RingLinks links_;
  RingWait wait_;
  RingTransfer transfer_;
  std::vector<uint64_t> lengths_;      // AllGather's block lengths, big-endian
  std::vector<uint16_t> wire_values_;  // AllReduceAs: the buffer in the wire type
  Handshake hello_;                    // the hello we sent our next
  Handshake next_accept_;              // and its accept
  bool stray_logged_ = false;          // a stray connection was logged during set-up
  bool shared_connection_ = false;     // two ranks on two machines: rank 0's connection both ways

  std::mutex mutex_;  // guards error_
  std::optional<Error> error_;
};

TcpCommunicator::TcpCommunicator(const CommOptions& options, std::vector<HostPort> peers,
                                 std::unique_ptr<TcpListener> listener, bool part)
    : Communicator(options.rank, options.world_size),
      peers_(std::move(peers)),
      rank_names_(options.rank_names),
      token_(options.token),
      attempt_(options.attempt),
      connect_timeout_s_(options.connect_timeout_s),
      next_((options.rank + 1) % options.world_size),
      prev_((options.rank - 1 + options.world_size) % options.world_size),
      transfer_(options.chunk_bytes) {
  algorithm_ = ParseAlgorithm("tcp", options.allreduce_algorithm);
  latency_bytes_ = options.latency_bytes;
  doubling_max_bytes_ = options.doubling_max_bytes;
  power_ = LargestPowerOfTwo(size());
  wake_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_.valid()) CORTADO_THROW(kComm, "eventfd failed: {}", ErrnoText(errno));
  links_.wake_fd = wake_.get();
  links_.wait = &wait_;
  links_.timeout_s = options.timeout_s;
  if (size() == 1) return;
  links_.next = Name(next_);
  links_.prev = Name(prev_);
  Connect(listener.get());
  links_.send_fd = send_.get();
  links_.recv_fd = recv_.get();
  // Two ranks are each other's next and prev, connected both ways. Between two machines the
  // data goes both ways over rank 0's connection, so that each direction's acknowledgements
  // ride on the other's data: over two one-way connections every acknowledgement is a packet of
  // its own, queued behind the data on the link (a shaped 10 Gbit/s link carried 88-90% of its
  // rate that way against 92-95% over one connection). Within one machine two connections are
  // faster (the kernel works on both at once: 3.9-6.0 GB/s on loopback against 2.7-3.6), and
  // are kept. Both ranks look at the same connection, so they decide alike.
  shared_connection_ = size() == 2 && !BothEndsOnOneHost(rank() == 0 ? send_.get() : recv_.get());
  if (shared_connection_) {
    if (rank() == 0) {
      links_.recv_fd = send_.get();
    } else {
      links_.send_fd = recv_.get();
    }
  }
  part_ = part;
  if (part) return;
  CORTADO_LOG_INFO("tcp communicator: rank {} of {}, next {}, prev {}{}", rank(), size(),
                   peers_[next_].ToString(), peers_[prev_].ToString(),
                   shared_connection_ ? ", one connection both ways" : "");
  // Two ranks swap over the ring's own connections; more need links of their own.
  if (options.hierarchical && MakeHierarchy(options)) return;
  if (algorithm_ != Algorithm::kRing && size() > 2) MakeDoublingLinks(options);
}

bool TcpCommunicator::MakeHierarchy(const CommOptions& options) {
  const int n = size(), r = rank();
  std::vector<std::string> hosts;  // in the order of their first rank
  std::vector<int> host_of(n);
  for (int q = 0; q < n; ++q) {
    const auto at = std::find(hosts.begin(), hosts.end(), peers_[q].host);
    host_of[q] = static_cast<int>(at - hosts.begin());
    if (at == hosts.end()) hosts.push_back(peers_[q].host);
  }
  const int host_count = static_cast<int>(hosts.size());
  if (host_count < 2 || host_count == n) return false;
  host_count_ = host_count;
  std::vector<int> mine, firsts;  // this host's ranks; every host's first rank
  for (int q = 0; q < n; ++q) {
    if (host_of[q] == host_of[r]) mine.push_back(q);
  }
  for (int h = 0; h < host_count; ++h) {
    firsts.push_back(
        static_cast<int>(std::find(host_of.begin(), host_of.end(), h) - host_of.begin()));
  }
  const bool first = mine.front() == r;
  const std::string context = fmt::format("rank {}: the hierarchy of hosts", r);
  auto open = [&] {
    return WithContext(context, [&] {
      return TcpListener::OpenInRange(peers_[r].host, options.first_port, options.last_port);
    });
  };
  std::unique_ptr<TcpListener> host_listener = mine.size() > 1 ? open() : nullptr;
  std::unique_ptr<TcpListener> hosts_listener = first ? open() : nullptr;
  const std::vector<std::string> ports =
      AllGather(fmt::format("{},{}", host_listener ? host_listener->port() : 0,
                            hosts_listener ? hosts_listener->port() : 0));
  auto port_of = [&](int q, int which) {
    const int port =
        AnnouncedPort(q, ports[q], static_cast<size_t>(which), "the hierarchy of hosts");
    if (port == 0) {
      CORTADO_THROW(kComm, "{} announced no port for the hierarchy of hosts (protocol error)",
                    Name(q));
    }
    return port;
  };
  auto ring_of = [&](const std::vector<int>& members, int which, const std::string& token,
                     const std::string& algorithm, std::unique_ptr<TcpListener> listener) {
    CommOptions sub = options;
    sub.world_size = static_cast<int>(members.size());
    sub.rank = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
    sub.token = options.token + token;
    sub.allreduce_algorithm = algorithm;
    sub.hierarchical = false;
    sub.rank_names.clear();
    std::vector<HostPort> ends;
    for (int q : members) {
      sub.rank_names.push_back(Name(q));
      ends.push_back({peers_[q].host, port_of(q, which)});
    }
    return WithContext(context, [&] {
      auto comm =
          std::make_unique<TcpCommunicator>(sub, std::move(ends), std::move(listener), true);
      // Its own pairs of recursive doubling, for small buffers between the hosts.
      if (comm->algorithm_ != Algorithm::kRing && comm->size() > 2) comm->MakeDoublingLinks(sub);
      return comm;
    });
  };
  if (mine.size() > 1) host_ = ring_of(mine, 0, "/host", "ring", std::move(host_listener));
  if (first) {
    hosts_ = ring_of(firsts, 1, "/hosts", options.allreduce_algorithm, std::move(hosts_listener));
  }
  CORTADO_LOG_INFO(
      "tcp communicator: rank {} sums across {} hosts in three stages: within its host ({} "
      "rank{}: {}), {}, then back to its host",
      r, host_count, mine.size(), mine.size() == 1 ? "" : "s", fmt::join(mine, ", "),
      first ? fmt::format("between the hosts' first ranks ({}{})", fmt::join(firsts, ", "),
                          hosts_->levels_.empty() && hosts_->fold_ == nullptr
                              ? ""
                              : "; recursive doubling and halving where faster")
            : fmt::format("rank {} between the hosts", mine.front()));
  return true;
}

std::string TcpCommunicator::DescribeAllReduce() const {
  // The hosts' ring runs the algorithm this communicator was built with (MakeHierarchy).
  const int ranks = host_count_ > 0 ? host_count_ : size();
  const std::string algorithm = DescribeAlgorithm(algorithm_, ranks, latency_bytes_);
  if (host_count_ == 0) return algorithm;
  return fmt::format("within each host by the ring, between the {} hosts by {}", host_count_,
                     algorithm);
}

void TcpCommunicator::Hierarchical(float* data, size_t count, WireType wire) {
  const size_t bytes = count * sizeof(float);
  if (host_ != nullptr) host_->AllReduce(data, count);
  if (hosts_ != nullptr) hosts_->AllReduceAs(data, count, wire);
  if (host_ != nullptr) host_->Broadcast(data, bytes, 0);
}

int TcpCommunicator::AnnouncedPort(int q, const std::string& list, size_t index,
                                   const std::string& what) const {
  std::string_view rest = list;
  for (size_t i = 0; i < index && rest.find(',') != std::string_view::npos; ++i) {
    rest.remove_prefix(rest.find(',') + 1);
  }
  const std::string port(rest.substr(0, rest.find(',')));
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    CORTADO_THROW(kComm, "{} announced no port for {} (protocol error)", Name(q), what);
  }
  return std::stoi(port);
}

void TcpCommunicator::MakeDoublingLinks(const CommOptions& options) {
  const int r = rank();
  const std::vector<int> mine = DoublingPartners(r, size());
  std::vector<std::unique_ptr<TcpListener>> listeners;
  std::string ports;
  for (size_t i = 0; i < mine.size(); ++i) {
    listeners.push_back(WithContext(fmt::format("rank {}: recursive doubling", r), [&] {
      return TcpListener::OpenInRange(peers_[r].host, options.first_port, options.last_port);
    }));
    ports += (i > 0 ? "," : "") + std::to_string(listeners.back()->port());
  }
  const std::vector<std::string> announced = AllGather(ports);
  // The port rank q listens on for its pair with `partner`.
  auto port_of = [&](int q, int partner) {
    const std::vector<int> order = DoublingPartners(q, size());
    const auto at = std::find(order.begin(), order.end(), partner) - order.begin();
    return AnnouncedPort(q, announced[q], static_cast<size_t>(at),
                         fmt::format("its pair with rank {}", partner));
  };
  for (size_t i = 0; i < mine.size(); ++i) {
    const int partner = mine[i];
    const int low = std::min(r, partner), high = std::max(r, partner);
    CommOptions pair = options;
    pair.world_size = 2;
    pair.rank = r == low ? 0 : 1;
    pair.token = options.token + "/doubling";
    pair.allreduce_algorithm = "ring";
    pair.rank_names = {Name(low), Name(high)};
    std::vector<HostPort> ends = {{peers_[low].host, port_of(low, high)},
                                  {peers_[high].host, port_of(high, low)}};
    auto comm =
        WithContext(fmt::format("rank {}: recursive doubling with {}", r, Name(partner)), [&] {
          return std::make_unique<TcpCommunicator>(pair, std::move(ends), std::move(listeners[i]),
                                                   true);
        });
    if (std::abs(partner - r) == power_) {
      fold_ = std::move(comm);
    } else {
      levels_.push_back(std::move(comm));
    }
  }
  if (part_) return;  // the hierarchy's log line speaks for it
  CORTADO_LOG_INFO(
      "tcp communicator: rank {} pairs with rank{} {} for allreduces by recursive doubling and "
      "halving ({})",
      r, mine.size() == 1 ? "" : "s", fmt::join(mine, ", "),
      algorithm_ == Algorithm::kAuto      ? "auto: where the cost model says they are faster"
      : algorithm_ == Algorithm::kHalving ? "halving for every allreduce"
                                          : "doubling for every allreduce");
}

Algorithm TcpCommunicator::ChooseFor(size_t ring_bytes, size_t float32_bytes) const {
  return Choose(algorithm_, size(), ring_bytes, float32_bytes, latency_bytes_, doubling_max_bytes_);
}

void TcpCommunicator::Exchange(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                               bool sum, WireType wire, const float* accumulate) {
  Guarded([&] {
    transfer_.Reset();
    transfer_.set_wire(wire);
    if (send_bytes > 0) {
      transfer_.sends().push_back({static_cast<const char*>(send), send_bytes, -1});
    }
    if (recv_bytes > 0) {
      transfer_.recvs().push_back({static_cast<char*>(recv), recv_bytes, sum, accumulate});
    }
    transfer_.Run(links_, "allreduce");
  });
}

void TcpCommunicator::ExchangeWith(int level, const void* send, size_t send_bytes, void* recv,
                                   size_t recv_bytes, bool sum, WireType wire,
                                   const float* accumulate) {
  TcpCommunicator* pair = level == kFold    ? fold_.get()
                          : levels_.empty() ? this  // two ranks: the ring's connections
                                            : levels_[static_cast<size_t>(level)].get();
  pair->Exchange(send, send_bytes, recv, recv_bytes, sum, wire, accumulate);
}

std::string TcpCommunicator::Name(int rank) const {
  if (static_cast<size_t>(rank) < rank_names_.size()) return rank_names_[rank];
  return fmt::format("rank {} ({})", rank, peers_[rank].ToString());
}

Handshake TcpCommunicator::Ours(Kind kind, int to) const {
  Handshake h;
  h.kind = kind;
  h.world = static_cast<uint32_t>(size());
  h.from = static_cast<uint32_t>(rank());
  h.to = static_cast<uint32_t>(to);
  h.attempt = attempt_;
  return h;
}

void TcpCommunicator::Connect(TcpListener* listener) {
  CORTADO_CHECK(listener != nullptr, "a tcp communicator of {} ranks needs a listener", size());
  if (listener->port() != peers_[rank()].port) {
    CORTADO_LOG_WARN("rank {} listens on port {} but peers[{}] is {}", rank(), listener->port(),
                     rank(), peers_[rank()].ToString());
  }
  const auto deadline = SecondsFromNow(connect_timeout_s_);
  const std::string self = fmt::format("rank {}", rank());
  const std::string next_at = fmt::format("rank {} at {}", next_, peers_[next_].ToString());

  // 1. Connect to the next rank and say hello.
  const sockaddr_in next_addr =
      ResolveIpv4(peers_[next_], fmt::format("peer {} '{}'", next_, peers_[next_].ToString()));
  send_ = ConnectWithRetry(next_addr, deadline, connect_timeout_s_, wake_.get(), self, next_at);
  hello_ = Ours(kHello, next_);
  hello_.nonce = FreshNonce();
  const std::string hello = Encode(hello_);
  if (const int err = SendAllBy(send_.get(), hello.data(), hello.size(), deadline, wake_.get())) {
    if (err == ECANCELED) CORTADO_THROW(kAborted, "{}: aborted during set-up", self);
    CORTADO_THROW(kComm, "{}: cannot send the handshake to {} ({})", self, next_at, ErrnoText(err));
  }

  // 2 and 3. Run the handshakes of the connections that arrive and of ours with the next rank,
  // each step as soon as its message comes (a refusal, or the next rank closing, ends the
  // set-up at once). The listener stays watched until both are done, for a second connection
  // claiming our prev's rank.
  Outgoing outgoing = Outgoing::kAwaitAccept;
  std::vector<Incoming> pending;
  auto advance_pending = [&](const std::vector<pollfd>& fds, size_t first,
                             Clock::time_point until) {
    std::vector<Incoming> kept;
    for (size_t i = 0; i < pending.size(); ++i) {
      Incoming& in = pending[i];
      Step step = Step::kKeep;
      if (fds[first + i].revents != 0) {
        step = AdvanceIncoming(&in, until);
      } else if (!in.hello && Clock::now() >= in.hello_by) {
        LogStray(in.address, "no hello");
        step = Step::kDrop;
      }
      if (step == Step::kKeep) kept.push_back(std::move(in));
    }
    pending = std::move(kept);
  };
  auto take_connection = [&] {
    // EAGAIN, ECONNABORTED, ...: nothing to do but wait for the next one.
    UniqueFd conn(::accept4(listener->fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn.valid()) return false;
    PrepareStreamSocket(conn.get());
    std::string address = PeerAddress(conn.get());
    if (pending.size() >= kMaxPending) {
      LogStray(address, "too many handshakes under way");
      return true;
    }
    pending.push_back({std::move(conn), std::move(address), SecondsFromNow(kHelloWaitS), {}, {}});
    return true;
  };
  while (outgoing != Outgoing::kDone || !recv_.valid()) {
    // After its verdict the next rank sends nothing on this socket: POLLIN then means it left.
    std::vector<pollfd> fds = {
        {wake_.get(), POLLIN, 0}, {send_.get(), POLLIN, 0}, {listener->fd(), POLLIN, 0}};
    auto wait_until = deadline;
    for (const Incoming& in : pending) {
      fds.push_back({in.fd.get(), POLLIN, 0});
      if (!in.hello) wait_until = std::min(wait_until, in.hello_by);
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(wait_until - Clock::now());
    const int rc =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (rc < 0 && errno != EINTR) CORTADO_THROW(kComm, "poll failed: {}", ErrnoText(errno));
    if (fds[0].revents != 0) CORTADO_THROW(kAborted, "{}: aborted during set-up", self);
    // The incoming connections first: when the next rank refuses us and leaves, its reason
    // (sent on its connection to us) says more than the closed socket.
    advance_pending(fds, 3, deadline);
    if (fds[1].revents != 0) {
      if (outgoing == Outgoing::kDone) {
        CORTADO_THROW(kComm, "{} closed the connection during set-up", Name(next_));
      }
      if (outgoing == Outgoing::kAwaitAccept) {
        ReadAccept(deadline);
        outgoing = Outgoing::kAwaitVerdict;
      } else {
        ReadVerdict(deadline);
        outgoing = Outgoing::kDone;
      }
    }
    if (fds[2].revents != 0) take_connection();
    if (Clock::now() >= deadline) {
      if (!recv_.valid()) {
        CORTADO_THROW(kTimeout, "{}: {} did not connect within {:g} s", self, Name(prev_),
                      connect_timeout_s_);
      }
      if (outgoing != Outgoing::kDone) {
        CORTADO_THROW(kTimeout, "{}: {} did not answer the handshake within {:g} s", self, next_at,
                      connect_timeout_s_);
      }
    }
  }

  // A second connection that claims our prev's rank, already queued or under way, fails the
  // job too; give those a moment to finish their handshake.
  const auto drain_until = std::min(deadline, Clock::now() + std::chrono::seconds(1));
  while (take_connection()) {
  }
  while (!pending.empty() && Clock::now() < drain_until) {
    std::vector<pollfd> fds = {{wake_.get(), POLLIN, 0}};
    for (const Incoming& in : pending) fds.push_back({in.fd.get(), POLLIN, 0});
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(drain_until - Clock::now());
    const int rc =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (rc < 0 && errno != EINTR) CORTADO_THROW(kComm, "poll failed: {}", ErrnoText(errno));
    if (fds[0].revents != 0) CORTADO_THROW(kAborted, "{}: aborted during set-up", self);
    advance_pending(fds, 1, drain_until);
  }
}

void TcpCommunicator::LogStray(const std::string& address, const std::string& why) {
  if (stray_logged_) return;
  stray_logged_ = true;
  CORTADO_LOG_WARN(
      "rank {}: ignoring a connection from {} that is not a Cortado peer ({}); others during "
      "this set-up are ignored without a message",
      rank(), address, why);
}

void TcpCommunicator::Refuse(int fd, int to, const std::string& why, Clock::time_point deadline) {
  Handshake refusal = Ours(kRefuse, to);
  refusal.message = why.substr(0, kMaxHandshakeString);
  const std::string bytes = Encode(refusal);
  SendAllBy(fd, bytes.data(), bytes.size(),
            std::min(deadline, Clock::now() + std::chrono::seconds(1)), wake_.get());
}

TcpCommunicator::Step TcpCommunicator::AdvanceIncoming(Incoming* in, Clock::time_point deadline) {
  Handshake h;
  const int err =
      ReadHandshake(in->fd.get(), std::min(deadline, SecondsFromNow(kHelloWaitS)), wake_.get(), &h);
  if (err == ECANCELED) CORTADO_THROW(kAborted, "rank {}: aborted during set-up", rank());
  if (err == EPROTO && h.magic == kMagic && h.version != kVersion) {
    CORTADO_THROW(kComm,
                  "a peer at {} speaks the tcp communicator's protocol version {}; rank {} "
                  "speaks version {} (mixed Cortado versions?)",
                  in->address, h.version, rank(), kVersion);
  }
  if (!in->hello) {
    if (err != 0 || h.kind != kHello) {
      LogStray(in->address, err != 0 ? ErrnoText(err) : "not a hello");
      return Step::kDrop;
    }
    // Answer whatever the hello says: the fields are checked once the peer has proved that it
    // knows the token, so that a peer of another job hears about the token and nothing else.
    in->accept = Ours(kAccept, prev_);
    in->accept.nonce = FreshNonce();
    in->accept.mac = HandshakeMac(token_, kAcceptLabel, h, in->accept);
    const std::string bytes = Encode(in->accept);
    if (const int send_err =
            SendAllBy(in->fd.get(), bytes.data(), bytes.size(), deadline, wake_.get())) {
      if (send_err == ECANCELED) CORTADO_THROW(kAborted, "rank {}: aborted during set-up", rank());
      LogStray(in->address, "gone before the accept: " + ErrnoText(send_err));
      return Step::kDrop;
    }
    in->hello = h;
    return Step::kKeep;
  }
  const Handshake& hello = *in->hello;
  const std::string claimed = fmt::format("rank {} at {}", hello.from, in->address);
  if (err != 0) {
    LogStray(in->address, "no confirm: " + ErrnoText(err));
    return Step::kDrop;
  }
  if (h.kind == kRefuse) {
    CORTADO_THROW(kComm, "{} refused the connection: {}", claimed, h.message);
  }
  if (h.kind != kConfirm) {
    LogStray(in->address, "not a confirm");
    return Step::kDrop;
  }
  const int from = static_cast<int>(hello.from);
  std::string why;
  if (!MacMatches(HandshakeMac(token_, kConnectLabel, hello, in->accept), h.mac)) {
    why = fmt::format("{} belongs to another job (token mismatch)", claimed);
  } else if (hello.attempt != attempt_) {
    why = fmt::format("attempt mismatch: {} has attempt {}, rank {} has {}", claimed, hello.attempt,
                      rank(), attempt_);
  } else if (hello.world != static_cast<uint32_t>(size())) {
    why = fmt::format("{} says the world has {} ranks, rank {} has {}", claimed, hello.world,
                      rank(), size());
  } else if (hello.to != static_cast<uint32_t>(rank())) {
    why = fmt::format("{} believes it connected to rank {}, but {} is rank {}", claimed, hello.to,
                      peers_[rank()].ToString(), rank());
  } else if (from != prev_) {
    why = fmt::format("rank {} expected rank {} but rank {} connected from {}", rank(), prev_,
                      hello.from, in->address);
  } else if (recv_.valid()) {
    why = fmt::format("duplicated rank {}: a second connection from {} claims to be rank {}",
                      hello.from, in->address, hello.from);
  }
  if (!why.empty()) {
    Refuse(in->fd.get(), from, why, deadline);
    CORTADO_THROW(kComm, "{}", why);
  }
  const std::string ready = Encode(Ours(kReady, prev_));
  if (const int send_err =
          SendAllBy(in->fd.get(), ready.data(), ready.size(), deadline, wake_.get())) {
    if (send_err == ECANCELED) CORTADO_THROW(kAborted, "rank {}: aborted during set-up", rank());
    CORTADO_THROW(kComm, "rank {}: cannot answer {}'s handshake ({})", rank(), Name(prev_),
                  ErrnoText(send_err));
  }
  recv_ = std::move(in->fd);
  return Step::kPrev;
}

Handshake TcpCommunicator::ReadFromNext(Clock::time_point deadline) {
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
  if (err == EPROTO && h.magic == kMagic && h.version != kVersion) {
    CORTADO_THROW(kComm,
                  "{} speaks the tcp communicator's protocol version {}; rank {} speaks version "
                  "{} (mixed Cortado versions?)",
                  next_at, h.version, rank(), kVersion);
  }
  if (err != 0) {
    CORTADO_THROW(kComm, "{} is not a Cortado peer ({})", next_at, ErrnoText(err));
  }
  if (h.kind == kRefuse) {
    CORTADO_THROW(kComm, "{} refused the connection: {}", next_at, h.message);
  }
  return h;
}

void TcpCommunicator::ReadAccept(Clock::time_point deadline) {
  const std::string next_at = fmt::format("rank {} at {}", next_, peers_[next_].ToString());
  const Handshake h = ReadFromNext(deadline);
  if (h.kind != kAccept) {
    CORTADO_THROW(kComm, "{} is not a Cortado peer (it did not answer the hello)", next_at);
  }
  if (!MacMatches(HandshakeMac(token_, kAcceptLabel, hello_, h), h.mac)) {
    const std::string why = fmt::format("{} belongs to another job (token mismatch)", next_at);
    Refuse(send_.get(), next_, why, deadline);
    CORTADO_THROW(kComm, "{}", why);
  }
  // The next rank knows the token: prove that we do too, and let it judge the rest.
  next_accept_ = h;
  Handshake confirm = Ours(kConfirm, next_);
  confirm.mac = HandshakeMac(token_, kConnectLabel, hello_, h);
  const std::string bytes = Encode(confirm);
  if (const int err = SendAllBy(send_.get(), bytes.data(), bytes.size(), deadline, wake_.get())) {
    if (err == ECANCELED) CORTADO_THROW(kAborted, "rank {}: aborted during set-up", rank());
    CORTADO_THROW(kComm, "rank {}: cannot send the handshake to {} ({})", rank(), next_at,
                  ErrnoText(err));
  }
  if (h.attempt != attempt_) {
    CORTADO_THROW(kComm, "attempt mismatch: {} has attempt {}, rank {} has {}", next_at, h.attempt,
                  rank(), attempt_);
  }
  if (h.world != static_cast<uint32_t>(size())) {
    CORTADO_THROW(kComm, "{} says the world has {} ranks, rank {} has {}", next_at, h.world, rank(),
                  size());
  }
}

void TcpCommunicator::ReadVerdict(Clock::time_point deadline) {
  const Handshake h = ReadFromNext(deadline);
  const Handshake& accept = next_accept_;
  if (h.kind != kReady) {
    CORTADO_THROW(kComm, "rank {} at {} is not a Cortado peer (it did not answer the confirm)",
                  next_, peers_[next_].ToString());
  }
  if (accept.from != static_cast<uint32_t>(next_) || accept.to != static_cast<uint32_t>(rank())) {
    CORTADO_THROW(kComm, "rank {} expected rank {} at {} but rank {} answered (for rank {})",
                  rank(), next_, peers_[next_].ToString(), accept.from, accept.to);
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
    CORTADO_LOG_WARN("tcp communicator of {} is broken: {}",
                     rank_names_.empty() ? fmt::format("rank {}", rank()) : Name(rank()),
                     error.what());
  }
  throw *first;
}

void TcpCommunicator::ShutdownSockets() noexcept {
  // Shut down, not closed: another thread may be polling them (Abort), and the descriptors
  // must not be reused under it. The peers see the connections end at once.
  if (send_.valid()) ::shutdown(send_.get(), SHUT_RDWR);
  if (recv_.valid()) ::shutdown(recv_.get(), SHUT_RDWR);
  // The pairs of recursive doubling (fixed once built) go down with the ring.
  for (const auto& pair : levels_) pair->Abort("the ring's communicator failed");
  if (fold_ != nullptr) fold_->Abort("the ring's communicator failed");
  if (host_ != nullptr) host_->Abort("the ring's communicator failed");
  if (hosts_ != nullptr) hosts_->Abort("the ring's communicator failed");
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
    if (host_ != nullptr || hosts_ != nullptr) return Hierarchical(data, count, WireType::kFloat32);
    if (RecursiveAllReduce(ChooseFor(count * sizeof(float), count * sizeof(float)), this, rank(), n,
                           data, count, WireType::kFloat32, &theirs_, &wire_values_)) {
      return;
    }
    const RingSegments segments(count, n);
    auto at = [&](int i) { return reinterpret_cast<char*>(data + segments.begin(i)); };
    auto bytes = [&](int i) { return segments.size(i) * sizeof(float); };
    transfer_.Reset();
    transfer_.set_wire(WireType::kFloat32);
    AddAllReducePieces(&transfer_, n, rank(), at, bytes, [](int) { return nullptr; });
    transfer_.Run(links_, "allreduce");
  });
}

void TcpCommunicator::AllReduceAs(float* data, size_t count, WireType wire) {
  if (wire == WireType::kFloat32) {
    AllReduce(data, count);
    return;
  }
  Guarded([&] {
    const int n = size();
    if (n == 1 || count == 0) return;
    const int r = rank();
    const bool bf16 = wire == WireType::kBFloat16;
    if (host_ != nullptr || hosts_ != nullptr) return Hierarchical(data, count, wire);
    // Halving carries wire values, rounding once per level (log2 p roundings where the ring has
    // one per step); doubling float32, rounded once at the end.
    if (RecursiveAllReduce(ChooseFor(count * sizeof(uint16_t), count * sizeof(float)), this, r, n,
                           data, count, wire, &theirs_, &wire_values_)) {
      return;
    }
    // The ring of AllReduce over a copy of the buffer in the wire type: what is sent and
    // received. A summed segment adds the received values to this rank's own float32 ones
    // (`data`) and keeps the rounded sum in the copy, which is what goes on. Only this rank's
    // own segment (the one it sends first, ungated) is rounded before the ring starts; the
    // others are written by the sums and the all-gather. Each final segment is widened back
    // into `data` as soon as it is complete, while the sockets carry the rest.
    wire_values_.resize(count);
    const RingSegments segments(count, n);
    auto narrow = [&](int segment) {
      const size_t begin = segments.begin(segment), end = begin + segments.size(segment);
      if (!bf16) return math::FloatsToFloat16(data + begin, end - begin, &wire_values_[begin]);
      for (size_t i = begin; i < end; ++i) wire_values_[i] = math::FloatToBFloat16(data[i]);
    };
    auto widen = [&](int segment) {
      const size_t begin = segments.begin(segment), end = begin + segments.size(segment);
      if (!bf16) return math::Float16sToFloats(&wire_values_[begin], end - begin, data + begin);
      for (size_t i = begin; i < end; ++i) data[i] = math::BFloat16ToFloat(wire_values_[i]);
    };
    auto at = [&](int i) {
      return reinterpret_cast<char*>(wire_values_.data() + segments.begin(i));
    };
    auto bytes = [&](int i) { return segments.size(i) * sizeof(uint16_t); };
    auto mod = [n](int i) { return ((i % n) + n) % n; };
    narrow(r);
    transfer_.Reset();
    transfer_.set_wire(wire);
    AddAllReducePieces(&transfer_, n, r, at, bytes,
                       [&](int i) -> const float* { return data + segments.begin(i); });
    // Received piece n - 2 completes the segment this rank owns, (r + 1) mod n; piece n - 1 + s
    // is segment (r - s) mod n, final. Every segment is one of them exactly once.
    transfer_.set_on_received([&](size_t piece) {
      const int k = static_cast<int>(piece);
      if (k == n - 2) widen(mod(r + 1));
      if (k >= n - 1) widen(mod(r - (k - (n - 1))));
    });
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

const char* TcpAllReduceAlgorithm(const CommOptions& options, size_t count, WireType wire) {
  const size_t wire_bytes = wire == WireType::kFloat32 ? sizeof(float) : sizeof(uint16_t);
  switch (Choose(ParseAlgorithm("tcp", options.allreduce_algorithm), options.world_size,
                 count * wire_bytes, count * sizeof(float), options.latency_bytes,
                 options.doubling_max_bytes)) {
    case Algorithm::kDoubling:
      return "doubling";
    case Algorithm::kHalving:
      return "halving";
    default:
      return "ring";
  }
}

std::optional<NeighbourSockets> TcpNeighbourSockets(const Communicator& comm) {
  const auto* tcp = dynamic_cast<const TcpCommunicator*>(&comm);
  if (tcp == nullptr) return std::nullopt;
  return tcp->Sockets();
}

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
