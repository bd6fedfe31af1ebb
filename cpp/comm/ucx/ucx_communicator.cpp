// SPDX-License-Identifier: Apache-2.0
// The ucx backend (see ucx_communicator.hpp).
//
// Wire format. Every operation moves two streams of pieces: the pieces this rank sends its next
// rank, and those it receives from its previous rank, in an order both ends derive from the
// operation, exactly as the tcp ring does (tcp_communicator.cpp describes the algorithms). Each
// piece is one UCX tag message of at most chunk_bytes whose tag is the operation's sequence
// number (high 32 bits; every rank counts its operations alike) and the piece's index in its
// stream (low 32 bits), so pieces of one operation never match another's. Receives are posted
// a window ahead. Over RDMA and shared memory a summed piece lands in one of the window's
// staging slots (mapped with ucp_mem_map once, so registered once for RDMA) and is added into
// place in stream order; over TCP, where UCX copies each message out of its own receive
// segments anyway, the receive's datatype adds it into place as it leaves them (RangeSum). Only
// then may the send gated on the piece go out. Sends are posted as soon as their gate allows, a
// window at a time.
//
// A 16-bit wire (AllReduceAs with float16 or bfloat16) runs the same ring over a copy of the
// buffer in the wire type, as the tcp ring does: a summed piece always lands in a staging slot,
// and each received value is added to this rank's own float32 value at its place, the sum
// rounded into the copy, which is what goes on. The result is the tcp ring's, bit for bit.
//
// Progress. One thread (the caller's) drives the UCX worker: it progresses until nothing is
// left to do, then arms the worker's event descriptor and polls it beside an eventfd that Abort
// writes, so a quiet wait costs no CPU.
#include "comm/ucx/ucx_communicator.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>
#include <ucs/debug/debug.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/rdma_devices.hpp"
#include "comm/recursive.hpp"
#include "comm/registry.hpp"
#include "comm/tcp/ring.hpp"
#include "comm/tcp/socket.hpp"
#include "comm/tcp/tcp_communicator.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "math/half_host.hpp"

namespace cortado::comm {
namespace {

constexpr size_t kMaxChunkBytes = size_t{64} << 20;
// Receives posted ahead of the first incomplete one (and staging slots for summed pieces).
constexpr size_t kRecvWindow = 4;
// Sends in flight at once.
constexpr size_t kSendWindow = 8;
// How long an operation keeps progressing UCX without sleeping after its last completion.
constexpr std::chrono::microseconds kSpin(200);
// How long an operation goes on taking what arrived after a connection it needs has failed.
constexpr std::chrono::milliseconds kLinkGrace(100);
// How long a failing or closing communicator waits for UCX to hand back its requests; and with
// connections that report no lost peer, when one of the peers is gone or the close is forced:
// then some requests never come back (a rendezvous the peer will not answer), and are released
// unfinished (UCX frees them when the worker is destroyed).
constexpr double kCleanupS = 5;
constexpr double kUnreportedCleanupS = 0.2;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string EnvOr(const char* name, const char* otherwise) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : otherwise;
}

// The transports UCX_TLS names, or none when it is unset or excludes ("^...").
std::vector<std::string> TlsNames() {
  const std::string tls = EnvOr("UCX_TLS", "");
  std::vector<std::string> names;
  if (tls.empty() || tls[0] == '^') return names;
  for (size_t begin = 0; begin <= tls.size();) {
    const size_t end = std::min(tls.find(',', begin), tls.size());
    names.push_back(tls.substr(begin, end - begin));
    begin = end + 1;
  }
  return names;
}

// Whether UCX_TLS names shared-memory transports only ("sm,self", "posix,cma,self"). UCX 1.13's
// shared memory reports no peer failures, so connections that ask for such reports cannot use
// it; with these transports alone they are made without (see SetUp).
bool OnlySharedMemory() {
  static const std::set<std::string> kShared = {"sm",  "shm",   "self", "posix", "sysv",
                                                "cma", "xpmem", "knem", "mm"};
  const std::vector<std::string> names = TlsNames();
  return !names.empty() && std::all_of(names.begin(), names.end(),
                                       [](const std::string& n) { return kShared.count(n) > 0; });
}

// Whether UCX will carry this rank's data over TCP: no active RDMA port here, or UCX_TLS names
// no RDMA transport; and not shared memory alone.
bool CarriedByTcp() {
  if (OnlySharedMemory()) return false;
  static const std::set<std::string> kRdma = {
      "rc",   "ud",       "dc",       "ib",      "rc_v",    "rc_x",    "ud_v", "ud_x",
      "dc_x", "rc_verbs", "ud_verbs", "rc_mlx5", "dc_mlx5", "ud_mlx5", "all"};
  const std::vector<std::string> names = TlsNames();
  const bool rdma_allowed =
      names.empty() || std::any_of(names.begin(), names.end(),
                                   [](const std::string& n) { return kRdma.count(n) > 0; });
  return !rdma_allowed || ActiveRdmaPorts().empty();
}

// This host and the namespaces that shared memory between processes depends on: the boot id and
// the IPC, mount and PID namespaces; "" when any cannot be read (then no two ranks count as on
// one host).
std::string HostIdentity() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string identity;
  if (!std::getline(boot, identity) || identity.empty()) return "";
  for (const char* ns : {"ipc", "mnt", "pid"}) {
    char link[128];
    const ssize_t n = ::readlink(fmt::format("/proc/self/ns/{}", ns).c_str(), link, sizeof(link));
    if (n <= 0) return "";
    identity += " " + std::string(link, static_cast<size_t>(n));
  }
  return identity;
}

std::string HostOf(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

// The transports of an endpoint's lanes, as ucp_ep_print_info names them ("tcp/lo",
// "rc_mlx5/mlx5_0:1", "posix/memory"), without repeats; "?" when UCX prints none.
std::string Transports(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = ::open_memstream(&text, &size);
  if (stream == nullptr) return "?";
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  const std::string info(text, size);
  std::free(text);
  // "#   lane[0]:  1:tcp/lo.0 md[1]  -> ..." : resource index, transport/device.
  static const std::regex kLane(R"(lane\[\d+\]:\s+\d+:([A-Za-z0-9_]+)/([^\s]+?)(\.\d+)?\s)");
  std::vector<std::string> found;
  for (std::sregex_iterator it(info.begin(), info.end(), kLane), end; it != end; ++it) {
    const std::string name = (*it)[1].str() + "/" + (*it)[2].str();
    if (std::find(found.begin(), found.end(), name) == found.end()) found.push_back(name);
  }
  return found.empty() ? std::string("?") : fmt::format("{}", fmt::join(found, "+"));
}

// A UCX generic datatype whose receives sum: the "buffer" of a receive is its RangeSum, and
// each range UCX unpacks is added into place straight from UCX's receive segment. It only
// receives.
ucs_status_t UnpackSum(void* state, size_t offset, const void* src, size_t length) {
  return static_cast<RangeSum*>(state)->Add(offset, src, length) ? UCS_OK
                                                                 : UCS_ERR_MESSAGE_TRUNCATED;
}
const ucp_generic_dt_ops_t kSumType = {
    [](void*, const void* buffer, size_t) { return const_cast<void*>(buffer); },  // start_pack
    [](void*, void* buffer, size_t) { return buffer; },                           // start_unpack
    [](void* state) { return static_cast<RangeSum*>(state)->bytes(); },           // packed_size
    [](void*, size_t, void*, size_t) -> size_t { return 0; },                     // pack
    UnpackSum,                                                                    // unpack
    [](void*) {},                                                                 // finish
};

// A request's outcome, written by UCX's callbacks during ucp_worker_progress.
struct Completion {
  bool done = false;
  ucs_status_t status = UCS_OK;
  ucp_tag_recv_info_t info{};
};

void SendCompleted(void* /*request*/, ucs_status_t status, void* user) {
  auto* c = static_cast<Completion*>(user);
  c->status = status;
  c->done = true;
}

void RecvCompleted(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info,
                   void* user) {
  auto* c = static_cast<Completion*>(user);
  c->status = status;
  if (info != nullptr) c->info = *info;
  c->done = true;
}

// A connection to a neighbour or a partner of recursive doubling; UCX reports its failure
// through EndpointFailed.
struct Link {
  int rank = -1;
  std::string name;  // "rank 1 (10.0.0.2)"
  ucp_ep_h ep = nullptr;
  ucs_status_t error = UCS_OK;
  bool closed = false;     // its set-up connection closed (WatchPeers)
  uint16_t exchanges = 0;  // pair exchanges made with it (their tags: PairTag)
};

// Tags: the ring's operations take (sequence << 32 | piece), the sequence counting every
// operation of every rank alike. A pair exchange of recursive doubling or halving, which only its
// two ranks make, takes (1 << 63 | level code << 48 | exchanges with that partner << 32 |
// piece): the level code names the partner (the level + 1, or 0x7fff for the fold), so that a
// partner already at its next level cannot be taken for this one.
uint64_t PairTag(int level, uint16_t exchange) {
  const uint64_t code = level == PairExchange::kFold ? 0x7fff : static_cast<uint64_t>(level) + 1;
  return uint64_t{1} << 63 | code << 48 | static_cast<uint64_t>(exchange) << 32;
}

void EndpointFailed(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* link = static_cast<Link*>(arg);
  if (link->error == UCS_OK) link->error = status;
}

class UcxCommunicator final : public Communicator, private PairExchange {
 public:
  UcxCommunicator(const CommOptions& options, std::unique_ptr<TcpListener> listener);
  ~UcxCommunicator() override;

  const char* backend() const override { return "ucx"; }
  std::string Describe() const override { return description_; }
  void AllReduce(float* data, size_t count) override;
  void AllReduceAs(float* data, size_t count, WireType wire) override;
  bool SupportsWire(WireType /*wire*/) const override { return true; }
  void Broadcast(void* data, size_t bytes, int root) override;
  std::vector<std::string> AllGather(const std::string& mine) override;
  void Barrier() override;
  void Abort(const std::string& reason) noexcept override;

 private:
  // The tcp ring's pieces (ring.hpp): a send gated on the received piece it forwards.
  using SendPiece = RingTransfer::SendPiece;
  using RecvPiece = RingTransfer::RecvPiece;
  struct Pending {
    void* request = nullptr;  // null once released (or never needed)
    Completion completion;
    RangeSum sum;  // a piece summed as UCX unpacks it
  };

  void SetUp(const CommOptions& options, std::unique_ptr<TcpListener> listener);
  // Moves both streams to their ends, to next and from prev; `op` names the operation in errors.
  // Every rank's call consumes one tag sequence number.
  void Run(const char* op, double timeout_s);
  // The same to `to` and from `from`, the tags (of the pieces, in order) from `tag`.
  void RunWith(Link* to, Link* from, uint64_t tag, const char* op, double timeout_s);
  // PairExchange: one transfer with the partner of `level` (levels_, or fold_), over the ring's
  // connection on two ranks.
  void ExchangeWith(int level, const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                    bool sum, WireType wire, const float* accumulate) override;
  // How an allreduce that moves ring_bytes by the ring and float32_bytes by doubling goes.
  Algorithm ChooseFor(size_t ring_bytes, size_t float32_bytes) const {
    return Choose(algorithm_, size(), ring_bytes, float32_bytes, options_.latency_bytes,
                  options_.doubling_max_bytes);
  }
  void PostRecv(size_t i, uint64_t tag);
  void PostSend(size_t i, uint64_t tag, const char* op);
  // Appends the pieces of `bytes` at `data` (one per chunk) to the streams.
  void AddSends(const char* data, size_t bytes, int first_gate);
  // `accumulate`: with a 16-bit wire, the float32 values at the place of data's (see RecvPiece).
  void AddRecvs(char* data, size_t bytes, bool sum, const float* accumulate = nullptr);
  // The ring of AllReduce over `count` values of `value_bytes` each at `data`; `accumulate(i)`
  // gives a summed segment's float32 values on a 16-bit wire.
  template <typename Accumulate>
  void AddAllReducePieces(char* data, size_t count, size_t value_bytes,
                          const Accumulate& accumulate);
  // Adds the received staging slot of piece i into place.
  void Sum(size_t i);
  // Progresses until nothing moves; true when something did.
  bool Progress();
  // Sleeps on the worker's descriptor and the abort eventfd until something happens or `until`.
  void Wait(Clock::time_point until, const char* op);
  // Blocks of `lengths` bytes laid out one after the other in `out` (rank r's at offsets[r]),
  // this rank's already in place: every rank gets every block, around the ring.
  void RingAllGather(char* out, const std::vector<size_t>& offsets,
                     const std::vector<size_t>& lengths, const char* op, double timeout_s);
  // Every rank's lengths_[rank] to every rank (AllGather's lengths; Barrier).
  void GatherLengths(const char* op, double timeout_s);

  template <typename F>
  void Guarded(F&& body);
  void ThrowIfBroken();
  // Cancels what is in flight and closes the endpoints (forcibly: the peers see the
  // connections fail). Idempotent; on the operation's thread, or with op_mutex_ held.
  void Shutdown() noexcept;
  void CloseEndpoints(bool force) noexcept;
  double CleanupSeconds(bool force) const {
    return unreported_ && (force || next_.closed || prev_.closed) ? kUnreportedCleanupS : kCleanupS;
  }
  // Throws when a connection this operation still needs has failed: the one it sends on (to_)
  // while `sending`, the one it receives on (from_) while `receiving`.
  void CheckLinks(const char* op, bool sending = true, bool receiving = true);
  bool LinkFailed(bool sending, bool receiving) const;
  // During a pair exchange (recursive doubling or halving, whose partners' connections are not
  // watched): a neighbour whose set-up connection closed, which ends the job all the same.
  const Link* ClosedNeighbour() const;
  [[noreturn]] void ThrowAborted(const char* op);
  // Every connection: next, prev, the partners.
  std::vector<Link*> Links() {
    std::vector<Link*> links = {&next_, &prev_};
    for (const auto& level : levels_) links.push_back(level.get());
    if (fold_ != nullptr) links.push_back(fold_.get());
    return links;
  }
  // The rank this one receives from.
  const Link& From() const { return prev_.rank >= 0 ? prev_ : next_; }
  Link& From() { return prev_.rank >= 0 ? prev_ : next_; }
  // Connections whose transports report no lost peer (shared memory): the set-up ring's
  // connections with the same neighbours are watched instead, since a rank that dies, is
  // aborted or leaves closes them. Marks the link of a closed one as failed; does not wait.
  void WatchPeers();

  CommOptions options_;
  size_t chunk_bytes_;
  std::unique_ptr<Communicator> bootstrap_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1;
  UniqueFd wake_;  // an eventfd, readable once aborted
  // The set-up ring's sockets to next and from prev, watched while some connection reports no
  // lost peer (-1 otherwise).
  NeighbourSockets watched_;
  bool unreported_ = false;  // some connection reports no lost peer (shared memory)
  Clock::time_point last_watch_{};
  // The next rank, and the previous one when it is another (N > 2).
  Link next_;
  Link prev_;
  // Recursive doubling and halving (CommOptions::allreduce_algorithm): the partner of each level
  // and the fold's (recursive.hpp), made with the ring's connections when the algorithm is not
  // the ring and there are more than two ranks.
  Algorithm algorithm_ = Algorithm::kRing;
  std::vector<std::unique_ptr<Link>> levels_;
  std::unique_ptr<Link> fold_;
  std::vector<float> theirs_;  // a partner's buffer (doubling)
  // The connections the running operation sends on and receives on.
  Link* to_ = &next_;
  Link* from_ = &next_;
  std::vector<float> staging_;  // kRecvWindow slots of chunk_bytes_
  // The operation's wire: float32, or the 16-bit type of AllReduceAs (its values in wire_values_).
  WireType wire_ = WireType::kFloat32;
  std::vector<uint16_t> wire_values_;
  ucp_mem_h staging_memh_ = nullptr;
  // Over TCP, UCX copies every message out of its receive segments into the receive's buffer.
  // Summed pieces then go through kSumType, which adds each range into place as it leaves the
  // segment, instead of into a staging slot to be added later: one copy fewer. RDMA and
  // shared memory keep the staging slots, which rendezvous fills without a copy. 0 otherwise.
  ucp_datatype_t sum_type_ = 0;
  std::string description_;

  uint32_t sequence_ = 0;
  std::vector<SendPiece> sends_;
  std::vector<RecvPiece> recvs_;
  std::vector<Pending> send_state_;
  std::vector<Pending> recv_state_;
  std::vector<uint64_t> lengths_;  // AllGather's block lengths

  std::mutex op_mutex_;  // held by the running operation, and by Abort when none runs
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;  // guards abort_reason_ and error_
  std::string abort_reason_;
  std::optional<Error> error_;
};

UcxCommunicator::UcxCommunicator(const CommOptions& options, std::unique_ptr<TcpListener> listener)
    : Communicator(options.rank, options.world_size),
      options_(options),
      chunk_bytes_(std::clamp<size_t>(options.chunk_bytes / sizeof(float), 1,
                                      kMaxChunkBytes / sizeof(float)) *
                   sizeof(float)) {
  algorithm_ = ParseAlgorithm("ucx", options.allreduce_algorithm);
  wake_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_.valid()) CORTADO_THROW(kComm, "eventfd failed: {}", ErrnoText(errno));
  if (size() == 1) {
    description_ = "ucx: rank 0 of 1 (no connections)";
    return;
  }
  try {
    SetUp(options, std::move(listener));
  } catch (...) {
    Shutdown();  // closes the endpoints too
    if (staging_memh_ != nullptr) ucp_mem_unmap(context_, staging_memh_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (sum_type_ != 0) ucp_dt_destroy(sum_type_);
    if (context_ != nullptr) ucp_cleanup(context_);
    throw;
  }
}

void UcxCommunicator::SetUp(const CommOptions& options, std::unique_ptr<TcpListener> listener) {
  const std::string self = fmt::format("ucx rank {}", rank());
  CommOptions boot = options;
  boot.backend = "tcp";
  boot.allreduce_algorithm = "ring";  // set-up only: no connections for recursive doubling
  bootstrap_ = listener != nullptr ? CreateTcpCommunicator(boot, std::move(listener))
                                   : CreateCommunicator(boot);

  // Every rank on this host (one machine, Spark's local modes, a laptop) and UCX_TLS left to
  // UCX: the connections go without peer failure reports, so that UCX may take shared memory
  // (posix or sysv for small messages, cma's single copy for rendezvous: 1.3x to 3.5x the tcp
  // ring on loopback, against 0.7x to 1x for UCX over TCP); the set-up connections are watched
  // for lost peers instead. Ranks spread over hosts keep UCX's peer failure reports, which rule
  // shared memory out.
  const std::string identity = HostIdentity();
  const std::vector<std::string> identities = bootstrap_->AllGather(identity);
  const bool one_host = !identity.empty() && TlsNames().empty() &&
                        std::all_of(identities.begin(), identities.end(),
                                    [&](const std::string& other) { return other == identity; });
  const bool tcp = !one_host && CarriedByTcp();
  // Connections without peer failure reports: shared memory, chosen by UCX or named in UCX_TLS.
  const bool shared_memory = one_host || OnlySharedMemory();
  if (tcp) {
    // Over TCP, rendezvous costs every piece a handshake that queues behind the data on a busy
    // link (half a 1 Gbit/s link's rate); eager messages land straight in the receives posted
    // ahead. Receive segments of 256 KiB rather than 8 KiB cut UCX's per-segment work (1.3x on
    // loopback). RDMA and shared memory keep UCX's choices (zero-copy rendezvous). Each is only
    // a default: a UCX_* variable already set wins. (In the environment, not ucp_config_modify:
    // UCX reads its transports' settings from the environment only.)
    ::setenv("UCX_RNDV_THRESH", "inf", /*overwrite=*/0);
    ::setenv("UCX_TCP_TX_SEG_SIZE", "256k", 0);
    ::setenv("UCX_TCP_RX_SEG_SIZE", "256k", 0);
  } else if (shared_memory) {
    // Over shared memory, pieces below the default chunk (1 MiB) go eager, through UCX's shared
    // FIFO (two copies, no handshake), and whole chunks by rendezvous (cma: one copy). On 2-core
    // loopback UCX's own threshold made pieces of 32-512 KiB 0.5-0.8x as fast, and eager whole
    // chunks halved 4 ranks' rate at 4-16 MiB (bench/RESULTS.md).
    ::setenv("UCX_RNDV_THRESH", "768k", 0);
  }
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) {
    CORTADO_THROW(kComm, "{}: reading UCX's configuration (UCX_* variables): {}", self,
                  ucs_status_string(status));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) {
    CORTADO_THROW(kComm, "{}: ucp_init: {} (check UCX_TLS and UCX_NET_DEVICES)", self,
                  ucs_status_string(status));
  }
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time: the operations' caller, or Abort when no operation runs.
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  status = ucp_worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) {
    CORTADO_THROW(kComm, "{}: ucp_worker_create: {}", self, ucs_status_string(status));
  }
  if (tcp) {
    status = ucp_dt_create_generic(&kSumType, nullptr, &sum_type_);
    if (status != UCS_OK) {
      sum_type_ = 0;
      CORTADO_THROW(kComm, "{}: ucp_dt_create_generic: {}", self, ucs_status_string(status));
    }
  }
  status = ucp_worker_get_efd(worker_, &worker_fd_);
  if (status != UCS_OK) {
    CORTADO_THROW(kComm, "{}: ucp_worker_get_efd: {}", self, ucs_status_string(status));
  }

  // Every rank's worker address, through the set-up ring.
  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  status = ucp_worker_get_address(worker_, &address, &address_bytes);
  if (status != UCS_OK) {
    CORTADO_THROW(kComm, "{}: ucp_worker_get_address: {}", self, ucs_status_string(status));
  }
  const std::string mine(reinterpret_cast<const char*>(address), address_bytes);
  ucp_worker_release_address(worker_, address);
  const std::vector<std::string> addresses = bootstrap_->AllGather(mine);

  const int next = (rank() + 1) % size();
  const int prev = (rank() - 1 + size()) % size();
  auto name = [&](int r) {
    return r < static_cast<int>(options.peers.size())
               ? fmt::format("rank {} ({})", r, HostOf(options.peers[r]))
               : fmt::format("rank {}", r);
  };
  bool unreported = false;  // a connection whose transports report no peer failure
  auto connect = [&](Link* link, int to) {
    link->rank = to;
    link->name = name(to);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(addresses[to].data());
    ep.err_mode = shared_memory ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = EndpointFailed;
    ep.err_handler.arg = link;
    ucs_status_t s = ucp_ep_create(worker_, &ep, &link->ep);
    if (s == UCS_ERR_UNREACHABLE && ep.err_mode == UCP_ERR_HANDLING_MODE_PEER) {
      // Reachable through transports without peer failure reports only (OnlySharedMemory
      // could not tell from UCX_TLS): connect without, and rely on the timeout.
      ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      s = ucp_ep_create(worker_, &ep, &link->ep);
    }
    if (s == UCS_OK && ep.err_mode == UCP_ERR_HANDLING_MODE_NONE) unreported = true;
    if (s != UCS_OK) {
      link->ep = nullptr;
      CORTADO_THROW(kComm, "{}: cannot reach {} through UCX: {} (UCX_TLS={}, UCX_NET_DEVICES={})",
                    self, link->name, ucs_status_string(s), EnvOr("UCX_TLS", "all"),
                    EnvOr("UCX_NET_DEVICES", "all"));
    }
  };
  connect(&next_, next);
  if (prev != next) connect(&prev_, prev);
  // Recursive doubling's partners: endpoints of their own (with the same partner as next or
  // prev too), told apart from the ring's by their tags (PairTag).
  const std::vector<int> partners = algorithm_ != Algorithm::kRing && size() > 2
                                        ? DoublingPartners(rank(), size())
                                        : std::vector<int>{};
  for (const int partner : partners) {
    auto link = std::make_unique<Link>();
    connect(link.get(), partner);
    if (std::abs(partner - rank()) == LargestPowerOfTwo(size())) {
      fold_ = std::move(link);
    } else {
      levels_.push_back(std::move(link));
    }
  }
  unreported_ = unreported;
  if (unreported) {
    const std::optional<NeighbourSockets> sockets = TcpNeighbourSockets(*bootstrap_);
    if (sockets) watched_ = *sockets;
  }

  staging_.assign(kRecvWindow * chunk_bytes_ / sizeof(float), 0.0f);
  ucp_mem_map_params_t map{};
  map.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  map.address = staging_.data();
  map.length = staging_.size() * sizeof(float);
  status = ucp_mem_map(context_, &map, &staging_memh_);
  if (status != UCS_OK) {
    staging_memh_ = nullptr;
    CORTADO_THROW(kComm,
                  "{}: registering {} bytes of staging memory: {} (is `ulimit -l` "
                  "large enough?)",
                  self, map.length, ucs_status_string(status));
  }

  // One message around the ring and a flush of both endpoints: every connection is made, or
  // its failure named, before the communicator is handed out.
  {
    const std::lock_guard<std::mutex> lock(op_mutex_);
    uint64_t token = static_cast<uint64_t>(rank());
    uint64_t from_prev = 0;
    sends_.clear();
    recvs_.clear();
    sends_.push_back({reinterpret_cast<const char*>(&token), sizeof(token), -1});
    recvs_.push_back({reinterpret_cast<char*>(&from_prev), sizeof(from_prev), false});
    Run("the first message around the ring", options.connect_timeout_s);
    if (from_prev != static_cast<uint64_t>(prev)) {
      CORTADO_THROW(kComm, "expected the first message from rank {}, got one from rank {}", prev,
                    from_prev);
    }
    const auto deadline = Clock::now() + Seconds(options.connect_timeout_s);
    for (Link* link : Links()) {
      if (link->ep == nullptr) continue;
      ucp_request_param_t param{};
      void* request = ucp_ep_flush_nbx(link->ep, &param);
      if (UCS_PTR_IS_ERR(request)) {
        CORTADO_THROW(kComm, "cannot reach {}: {}", link->name,
                      ucs_status_string(UCS_PTR_STATUS(request)));
      }
      while (request != nullptr) {
        Progress();
        const ucs_status_t s = ucp_request_check_status(request);
        if (s != UCS_INPROGRESS) {
          ucp_request_free(request);
          request = nullptr;
          if (s != UCS_OK) {
            CORTADO_THROW(kComm, "cannot reach {}: {}", link->name, ucs_status_string(s));
          }
          break;
        }
        CheckLinks("set-up");
        if (Clock::now() > deadline) {
          ucp_request_cancel(worker_, request);
          CORTADO_THROW(kTimeout, "{} did not answer within {:g} s", link->name,
                        options.connect_timeout_s);
        }
        Wait(std::min(deadline, Clock::now() + std::chrono::milliseconds(100)), "set-up");
      }
    }
    // A rank whose flushes are done goes on progressing until every rank's are: a flush may
    // need its peer's progress (wireup), and a rank that left set-up makes none until its next
    // operation.
    lengths_.assign(static_cast<size_t>(size()), 0);
    GatherLengths("the end of set-up", options.connect_timeout_s);
  }

  if (prev_.ep == nullptr) {
    description_ = fmt::format("ucx: rank {} of {}; with {}: {}", rank(), size(), next_.name,
                               Transports(next_.ep));
  } else {
    description_ = fmt::format("ucx: rank {} of {}; to {}: {}; from {}: {}", rank(), size(),
                               next_.name, Transports(next_.ep), prev_.name, Transports(prev_.ep));
  }
  description_ += "; allreduce: " + DescribeAlgorithm(algorithm_, size(), options.latency_bytes);
  if (!partners.empty()) description_ += fmt::format(" (partners {})", fmt::join(partners, ", "));
  if (unreported) {
    description_ += watched_.to_next >= 0 ? std::string(
                                                " (shared memory reports no lost peer: the set-up "
                                                "connections are watched for it)")
                                          : fmt::format(
                                                " (shared memory reports no lost peer: the {:g} s "
                                                "timeout does)",
                                                options.timeout_s);
  }
  CORTADO_LOG_INFO("{}", description_);
}

UcxCommunicator::~UcxCommunicator() {
  if (worker_ == nullptr) return;
  {
    const std::lock_guard<std::mutex> lock(op_mutex_);
    // A clean close flushes what this rank sent last, which its peers may still be reading.
    CloseEndpoints(error_.has_value() || aborted_.load());
  }
  if (staging_memh_ != nullptr) ucp_mem_unmap(context_, staging_memh_);
  ucp_worker_destroy(worker_);
  if (sum_type_ != 0) ucp_dt_destroy(sum_type_);
  ucp_cleanup(context_);
}

void UcxCommunicator::CloseEndpoints(bool force) noexcept {
  std::vector<void*> closing;
  for (Link* link : Links()) {
    if (link->ep == nullptr) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // A failed endpoint can only be closed forcibly.
    param.flags = force || link->error != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* request = ucp_ep_close_nbx(link->ep, &param);
    link->ep = nullptr;
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) closing.push_back(request);
  }
  const double wait_s = CleanupSeconds(force);
  const auto deadline = Clock::now() + Seconds(wait_s);
  while (!closing.empty() && Clock::now() < deadline) {
    while (ucp_worker_progress(worker_) != 0) {
    }
    for (auto it = closing.begin(); it != closing.end();) {
      if (ucp_request_check_status(*it) != UCS_INPROGRESS) {
        ucp_request_free(*it);
        it = closing.erase(it);
      } else {
        ++it;
      }
    }
    if (!closing.empty()) ::usleep(1000);
  }
  if (!closing.empty()) {
    CORTADO_LOG_WARN("ucx rank {}: an endpoint did not close within {:g} s", rank(), wait_s);
    // Released now, freed by UCX when it completes (the worker's destruction insists).
    for (void* request : closing) ucp_request_free(request);
  }
}

void UcxCommunicator::Shutdown() noexcept {
  if (worker_ == nullptr) return;
  // Receives in flight would still write into the caller's buffers: cancel them, and close the
  // endpoints, which ends the sends (with an error) and tells the peers.
  for (Pending& p : recv_state_) {
    if (p.request != nullptr && !p.completion.done) ucp_request_cancel(worker_, p.request);
  }
  CloseEndpoints(true);
  const double wait_s = CleanupSeconds(true);
  const auto deadline = Clock::now() + Seconds(wait_s);
  size_t unreleased = 0;
  for (auto* states : {&recv_state_, &send_state_}) {
    for (Pending& p : *states) {
      if (p.request == nullptr) continue;
      while (!p.completion.done && Clock::now() < deadline) {
        if (ucp_worker_progress(worker_) == 0) ::usleep(100);
      }
      // Released anyway: UCX frees it when it completes, at the latest as the worker is
      // destroyed, and its callback still finds `p`, which lives until then.
      if (!p.completion.done) ++unreleased;
      ucp_request_free(p.request);
      p.request = nullptr;
    }
  }
  if (unreleased > 0 && wait_s == kCleanupS) {
    CORTADO_LOG_WARN("ucx rank {}: {} requests were not released within {:g} s", rank(), unreleased,
                     wait_s);
  }
}

void UcxCommunicator::ThrowIfBroken() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (error_) throw *error_;
  if (aborted_.load()) {
    error_ =
        Error(ErrorCode::kAborted, fmt::format("ucx rank {}: aborted: {}", rank(), abort_reason_));
    throw *error_;
  }
}

template <typename F>
void UcxCommunicator::Guarded(F&& body) {
  if (size() == 1) {
    ThrowIfBroken();
    return;
  }
  const std::lock_guard<std::mutex> lock(op_mutex_);
  // Checked under the lock: an Abort that came just before has closed the endpoints.
  ThrowIfBroken();
  try {
    body();
  } catch (...) {
    Shutdown();
    std::string what;
    try {
      throw;
    } catch (const Error& e) {
      const std::lock_guard<std::mutex> guard(mutex_);
      if (!error_) error_ = e;
      what = e.what();
    } catch (const std::exception& e) {
      const std::lock_guard<std::mutex> guard(mutex_);
      if (!error_) error_ = Error(ErrorCode::kInternal, e.what());
      what = e.what();
    }
    bootstrap_->Abort(what);
    throw;
  }
}

void UcxCommunicator::Abort(const std::string& reason) noexcept {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (abort_reason_.empty()) abort_reason_ = reason.empty() ? "aborted" : reason;
  }
  aborted_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  if (worker_ != nullptr && op_mutex_.try_lock()) {
    // No operation runs to notice: close the connections here, so the peers learn of it.
    Shutdown();
    op_mutex_.unlock();
  }
  if (bootstrap_ != nullptr) bootstrap_->Abort(reason);
}

void UcxCommunicator::ThrowAborted(const char* op) {
  const std::lock_guard<std::mutex> lock(mutex_);
  CORTADO_THROW(kAborted, "ucx rank {}: aborted during {}: {}", rank(), op, abort_reason_);
}

bool UcxCommunicator::LinkFailed(bool sending, bool receiving) const {
  return (sending && to_->error != UCS_OK) || (receiving && from_->error != UCS_OK) ||
         ClosedNeighbour() != nullptr;
}

const Link* UcxCommunicator::ClosedNeighbour() const {
  if (to_ == &next_ || to_ == &prev_) return nullptr;
  return next_.closed ? &next_ : prev_.closed ? &prev_ : nullptr;
}

void UcxCommunicator::CheckLinks(const char* op, bool sending, bool receiving) {
  // With two ranks both directions are one connection.
  const Link* failed = sending && to_->error != UCS_OK       ? to_
                       : receiving && from_->error != UCS_OK ? from_
                                                             : ClosedNeighbour();
  if (failed != nullptr && failed->closed) {
    CORTADO_THROW(kComm,
                  "ucx rank {}: {} is gone during {} (it closed its set-up connection: it "
                  "ended, failed or was aborted)",
                  rank(), failed->name, op);
  }
  if (failed != nullptr) {
    CORTADO_THROW(kComm,
                  "ucx rank {}: the connection with {} failed during {}: {} (the peer "
                  "is gone or unreachable)",
                  rank(), failed->name, op, ucs_status_string(failed->error));
  }
}

void UcxCommunicator::WatchPeers() {
  if (watched_.to_next < 0) return;
  last_watch_ = Clock::now();
  pollfd fds[2] = {{watched_.to_next, POLLRDHUP, 0}, {watched_.from_prev, POLLRDHUP, 0}};
  const int count = watched_.from_prev == watched_.to_next ? 1 : 2;
  if (::poll(fds, count, 0) <= 0) return;
  auto mark = [](Link* link) {
    if (link->error == UCS_OK) {
      link->error = UCS_ERR_CONNECTION_RESET;
      link->closed = true;
    }
  };
  constexpr short kClosed = POLLRDHUP | POLLHUP | POLLERR;
  // One socket both ways only with two ranks, where From() is next_ too.
  if ((fds[0].revents & kClosed) != 0) mark(&next_);
  if (count == 2 && (fds[1].revents & kClosed) != 0) mark(&From());
}

bool UcxCommunicator::Progress() {
  bool any = false;
  while (ucp_worker_progress(worker_) != 0) any = true;
  return any;
}

void UcxCommunicator::Wait(Clock::time_point until, const char* op) {
  const ucs_status_t status = ucp_worker_arm(worker_);
  if (status == UCS_ERR_BUSY) return;  // events are waiting: progress again
  if (status != UCS_OK) {
    CORTADO_THROW(kComm, "ucx rank {}: ucp_worker_arm failed during {}: {}", rank(), op,
                  ucs_status_string(status));
  }
  pollfd fds[4] = {{wake_.get(), POLLIN, 0},
                   {worker_fd_, POLLIN, 0},
                   {watched_.to_next, POLLRDHUP, 0},
                   {watched_.from_prev, POLLRDHUP, 0}};
  const nfds_t count = watched_.to_next < 0 ? 2 : 4;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
  const int rc = ::poll(fds, count, static_cast<int>(std::clamp<int64_t>(left, 0, 1000)));
  if (rc < 0 && errno != EINTR) {
    CORTADO_THROW(kComm, "ucx rank {}: poll failed during {}: {}", rank(), op, ErrnoText(errno));
  }
  if (rc > 0 && count == 4 && (fds[2].revents != 0 || fds[3].revents != 0)) WatchPeers();
}

void UcxCommunicator::PostRecv(size_t i, uint64_t tag) {
  const RecvPiece& piece = recvs_[i];
  Pending& state = recv_state_[i];
  ucp_request_param_t param{};
  // Always a request and a callback: UCX 1.13 leaves recv_info unset when a receive completes
  // at once, so the received length would be unknown.
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = RecvCompleted;
  param.user_data = &state.completion;
  param.datatype = ucp_dt_make_contig(1);
  void* buffer = piece.data;
  if (piece.sum && sum_type_ != 0 && wire_ == WireType::kFloat32) {
    state.sum.Reset(reinterpret_cast<float*>(piece.data), piece.bytes);
    buffer = &state.sum;
    param.datatype = sum_type_;
  } else if (piece.sum) {
    buffer = reinterpret_cast<char*>(staging_.data()) + (i % kRecvWindow) * chunk_bytes_;
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = staging_memh_;
  }
  void* request = ucp_tag_recv_nbx(worker_, buffer, piece.bytes, tag, ~uint64_t{0}, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {
    CORTADO_THROW(
        kComm, "ucx rank {}: posting a receive from {}: {}", rank(), from_->name,
        ucs_status_string(request == nullptr ? UCS_ERR_NO_MESSAGE : UCS_PTR_STATUS(request)));
  }
  state.request = request;
}

void UcxCommunicator::PostSend(size_t i, uint64_t tag, const char* op) {
  const SendPiece& piece = sends_[i];
  Pending& state = send_state_[i];
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.send = SendCompleted;
  param.user_data = &state.completion;
  param.datatype = ucp_dt_make_contig(1);
  void* request = ucp_tag_send_nbx(to_->ep, piece.data, piece.bytes, tag, &param);
  if (request == nullptr) {
    state.completion.done = true;  // sent (or buffered) at once
  } else if (UCS_PTR_IS_ERR(request)) {
    CORTADO_THROW(kComm, "ucx rank {}: sending to {} failed during {}: {}", rank(), to_->name, op,
                  ucs_status_string(UCS_PTR_STATUS(request)));
  } else {
    state.request = request;
  }
}

void UcxCommunicator::AddSends(const char* data, size_t bytes, int first_gate) {
  for (size_t at = 0, k = 0; at < bytes; at += chunk_bytes_, ++k) {
    const int gate = first_gate < 0 ? -1 : first_gate + static_cast<int>(k);
    sends_.push_back({data + at, std::min(chunk_bytes_, bytes - at), gate});
  }
}

void UcxCommunicator::AddRecvs(char* data, size_t bytes, bool sum, const float* accumulate) {
  // chunk_bytes_ is a whole number of floats, so of 16-bit values too.
  for (size_t at = 0; at < bytes; at += chunk_bytes_) {
    recvs_.push_back({data + at, std::min(chunk_bytes_, bytes - at), sum,
                      accumulate == nullptr ? nullptr : accumulate + at / sizeof(uint16_t)});
  }
}

void UcxCommunicator::Sum(size_t i) {
  const RecvPiece& piece = recvs_[i];
  const char* slot =
      reinterpret_cast<const char*>(staging_.data()) + (i % kRecvWindow) * chunk_bytes_;
  if (wire_ == WireType::kFloat32) {
    float* dst = reinterpret_cast<float*>(piece.data);
    const float* src = reinterpret_cast<const float*>(slot);
    const size_t n = piece.bytes / sizeof(float);
    for (size_t k = 0; k < n; ++k) dst[k] += src[k];
    return;
  }
  uint16_t* dst = reinterpret_cast<uint16_t*>(piece.data);
  const uint16_t* src = reinterpret_cast<const uint16_t*>(slot);
  const size_t n = piece.bytes / sizeof(uint16_t);
  if (wire_ == WireType::kBFloat16) {
    for (size_t k = 0; k < n; ++k) {
      dst[k] = math::FloatToBFloat16(piece.accumulate[k] + math::BFloat16ToFloat(src[k]));
    }
  } else {
    math::AddToFloat16(piece.accumulate, src, n, dst);
  }
}

void UcxCommunicator::Run(const char* op, double timeout_s) {
  RunWith(&next_, &From(), static_cast<uint64_t>(sequence_++) << 32, op, timeout_s);
}

void UcxCommunicator::RunWith(Link* to, Link* from, uint64_t high, const char* op,
                              double timeout_s) {
  to_ = to;
  from_ = from;
  const size_t n_send = sends_.size();
  const size_t n_recv = recvs_.size();
  send_state_.assign(n_send, Pending{});
  recv_state_.assign(n_recv, Pending{});
  size_t posted_recvs = 0;
  size_t ready = 0;  // received pieces complete (and summed), in stream order
  size_t posted_sends = 0;
  size_t sent = 0;  // sends complete, in stream order
  const auto timeout = Seconds(timeout_s);
  auto last_activity = Clock::now();
  while (ready < n_recv || sent < n_send) {
    bool moved = false;
    while (posted_recvs < n_recv && posted_recvs < ready + kRecvWindow) {
      PostRecv(posted_recvs, high | posted_recvs);
      ++posted_recvs;
    }
    while (posted_sends < n_send && posted_sends < sent + kSendWindow &&
           static_cast<long>(sends_[posted_sends].gate) < static_cast<long>(ready)) {
      PostSend(posted_sends, high | posted_sends, op);
      ++posted_sends;
      moved = true;
    }
    // Only this operation's completions count as movement: UCX's own events (keepalives, a
    // failed endpoint's) must not keep a stuck call alive.
    Progress();
    while (ready < posted_recvs && recv_state_[ready].completion.done) {
      Pending& state = recv_state_[ready];
      if (state.request != nullptr) {
        ucp_request_free(state.request);
        state.request = nullptr;
      }
      if (state.completion.status != UCS_OK) {
        CheckLinks(op);
        CORTADO_THROW(kComm, "ucx rank {}: receiving from {} failed during {}: {}", rank(),
                      from_->name, op, ucs_status_string(state.completion.status));
      }
      if (state.completion.info.length != recvs_[ready].bytes) {
        CORTADO_THROW(kComm,
                      "ucx rank {}: {} sent {} bytes where {} were due during {} (a "
                      "protocol error: do both run the same operations?)",
                      rank(), from_->name, state.completion.info.length, recvs_[ready].bytes, op);
      }
      if (recvs_[ready].sum && (sum_type_ == 0 || wire_ != WireType::kFloat32)) Sum(ready);
      ++ready;
      moved = true;
    }
    while (sent < posted_sends && send_state_[sent].completion.done) {
      Pending& state = send_state_[sent];
      if (state.request != nullptr) {
        ucp_request_free(state.request);
        state.request = nullptr;
      }
      if (state.completion.status != UCS_OK) {
        CheckLinks(op);
        CORTADO_THROW(kComm, "ucx rank {}: sending to {} failed during {}: {}", rank(), to_->name,
                      op, ucs_status_string(state.completion.status));
      }
      ++sent;
      moved = true;
    }
    if (aborted_.load()) ThrowAborted(op);
    const auto now = Clock::now();
    if (moved) {
      last_activity = now;
      continue;
    }
    // While spinning: a look at the watched sockets every millisecond (Wait polls them too).
    if (now - last_watch_ >= std::chrono::milliseconds(1)) WatchPeers();
    // A failed connection ends the call when the call still needs it and nothing has moved for
    // a moment: a neighbour that has finished the operation closes its connections as it
    // leaves, and what it sent before is still taken.
    if (LinkFailed(sent < n_send, ready < n_recv)) {
      if (now - last_activity >= kLinkGrace) CheckLinks(op, sent < n_send, ready < n_recv);
      Wait(now + std::chrono::milliseconds(10), op);
      continue;
    }
    if (now - last_activity >= timeout) {
      if (ready < n_recv) {
        CORTADO_THROW(kTimeout, "ucx rank {}: no data from {} for {:g} s during {}", rank(),
                      from_->name, timeout_s, op);
      }
      CORTADO_THROW(kTimeout, "ucx rank {}: {} took no data for {:g} s during {}", rank(),
                    to_->name, timeout_s, op);
    }
    // Rendezvous steps and pieces follow each other within microseconds: keep progressing for a
    // moment before sleeping on the descriptor (a sleep and a wake-up per step cost a 64 KiB
    // allreduce four times its time), yielding the core in between.
    if (now - last_activity < kSpin) {
      // Ranks may outnumber the cores: let a peer that shares this one run meanwhile.
      std::this_thread::yield();
      continue;
    }
    Wait(last_activity + timeout, op);
  }
}

template <typename Accumulate>
void UcxCommunicator::AddAllReducePieces(char* data, size_t count, size_t value_bytes,
                                         const Accumulate& accumulate) {
  const int n = size();
  const int r = rank();
  const RingSegments segments(count, n);
  auto mod = [n](int i) { return ((i % n) + n) % n; };
  auto bytes_of = [&](int seg) { return segments.size(seg) * value_bytes; };
  auto at = [&](int seg) { return data + segments.begin(seg) * value_bytes; };
  sends_.clear();
  recvs_.clear();
  // Reduce-scatter step t sends segment r - t and sums segment r - t - 1 from prev; all-gather
  // step s sends segment r + 1 - s and receives segment r - s. What a step sends is what the
  // step before it received, gated piece by piece.
  int previous_first = -1;  // index of the first piece received at the step before
  for (int step = 0; step < 2 * (n - 1); ++step) {
    const bool reducing = step < n - 1;
    const int s = reducing ? step : step - (n - 1);
    const int out = reducing ? mod(r - s) : mod(r + 1 - s);
    const int in = reducing ? mod(r - s - 1) : mod(r - s);
    AddSends(at(out), bytes_of(out), step == 0 ? -1 : previous_first);
    previous_first = static_cast<int>(recvs_.size());
    AddRecvs(at(in), bytes_of(in), reducing, reducing ? accumulate(in) : nullptr);
  }
}

void UcxCommunicator::ExchangeWith(int level, const void* send, size_t send_bytes, void* recv,
                                   size_t recv_bytes, bool sum, WireType wire,
                                   const float* accumulate) {
  Link* link = level == kFold    ? fold_.get()
               : levels_.empty() ? &next_  // two ranks: the ring's connection
                                 : levels_[static_cast<size_t>(level)].get();
  sends_.clear();
  recvs_.clear();
  AddSends(static_cast<const char*>(send), send_bytes, -1);
  AddRecvs(static_cast<char*>(recv), recv_bytes, sum, accumulate);
  wire_ = wire;
  try {
    RunWith(link, link, PairTag(level, link->exchanges++), "allreduce", options_.timeout_s);
  } catch (...) {
    wire_ = WireType::kFloat32;
    throw;
  }
  wire_ = WireType::kFloat32;
}

void UcxCommunicator::AllReduce(float* data, size_t count) {
  Guarded([&] {
    if (count == 0) return;
    if (RecursiveAllReduce(ChooseFor(count * sizeof(float), count * sizeof(float)), this, rank(),
                           size(), data, count, WireType::kFloat32, &theirs_, &wire_values_)) {
      return;
    }
    AddAllReducePieces(reinterpret_cast<char*>(data), count, sizeof(float),
                       [](int) -> const float* { return nullptr; });
    Run("allreduce", options_.timeout_s);
  });
}

void UcxCommunicator::AllReduceAs(float* data, size_t count, WireType wire) {
  if (wire == WireType::kFloat32) {
    AllReduce(data, count);
    return;
  }
  Guarded([&] {
    if (size() == 1 || count == 0) return;
    const bool bf16 = wire == WireType::kBFloat16;
    // Halving carries wire values, as the ring does; doubling float32 values, rounded once at
    // the end: the tcp backend's choices and bits.
    if (RecursiveAllReduce(ChooseFor(count * sizeof(uint16_t), count * sizeof(float)), this, rank(),
                           size(), data, count, wire, &theirs_, &wire_values_)) {
      return;
    }
    // Only this rank's own segment, the one it sends first, is rounded before the ring starts;
    // the sums and the all-gather write the others.
    const RingSegments segments(count, size());
    wire_values_.resize(count);
    const size_t begin = segments.begin(rank()), own = segments.size(rank());
    if (bf16) {
      for (size_t i = begin; i < begin + own; ++i) wire_values_[i] = math::FloatToBFloat16(data[i]);
    } else {
      math::FloatsToFloat16(data + begin, own, &wire_values_[begin]);
    }
    AddAllReducePieces(reinterpret_cast<char*>(wire_values_.data()), count, sizeof(uint16_t),
                       [&](int seg) -> const float* { return data + segments.begin(seg); });
    wire_ = wire;
    try {
      Run("allreduce", options_.timeout_s);
    } catch (...) {
      wire_ = WireType::kFloat32;
      throw;
    }
    wire_ = WireType::kFloat32;
    if (bf16) {
      for (size_t i = 0; i < count; ++i) data[i] = math::BFloat16ToFloat(wire_values_[i]);
    } else {
      math::Float16sToFloats(wire_values_.data(), count, data);
    }
  });
}

void UcxCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size()) {
    CORTADO_THROW(kInvalidArgument, "broadcast from rank {} in a world of {} ranks", root, size());
  }
  Guarded([&] {
    const int position = (rank() - root + size()) % size();
    char* p = static_cast<char*>(data);
    sends_.clear();
    recvs_.clear();
    if (position != 0) AddRecvs(p, bytes, false);
    // Everyone but root's prev passes the bytes on as they arrive.
    if (position != size() - 1) AddSends(p, bytes, position == 0 ? -1 : 0);
    Run("broadcast", options_.timeout_s);
  });
}

void UcxCommunicator::RingAllGather(char* out, const std::vector<size_t>& offsets,
                                    const std::vector<size_t>& lengths, const char* op,
                                    double timeout_s) {
  const int n = size();
  auto mod = [n](int i) { return ((i % n) + n) % n; };
  sends_.clear();
  recvs_.clear();
  int previous_first = -1;
  for (int s = 0; s < n - 1; ++s) {
    const int block_out = mod(rank() - s);
    const int block_in = mod(rank() - s - 1);
    AddSends(out + offsets[block_out], lengths[block_out], s == 0 ? -1 : previous_first);
    previous_first = static_cast<int>(recvs_.size());
    AddRecvs(out + offsets[block_in], lengths[block_in], false);
  }
  Run(op, timeout_s);
}

std::vector<std::string> UcxCommunicator::AllGather(const std::string& mine) {
  std::vector<std::string> blocks(size());
  if (size() == 1) {
    ThrowIfBroken();
    blocks[0] = mine;
    return blocks;
  }
  Guarded([&] {
    const size_t n = static_cast<size_t>(size());
    lengths_.assign(n, 0);
    lengths_[rank()] = mine.size();
    GatherLengths("allgather", options_.timeout_s);
    std::vector<size_t> offsets(n);
    std::vector<size_t> lengths(n);
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      lengths[i] = static_cast<size_t>(lengths_[i]);
      offsets[i] = total;
      total += lengths[i];
    }
    std::string all(total, '\0');
    std::memcpy(all.data() + offsets[rank()], mine.data(), mine.size());
    RingAllGather(all.data(), offsets, lengths, "allgather", options_.timeout_s);
    for (size_t i = 0; i < n; ++i) blocks[i] = all.substr(offsets[i], lengths[i]);
  });
  return blocks;
}

void UcxCommunicator::GatherLengths(const char* op, double timeout_s) {
  const size_t n = static_cast<size_t>(size());
  std::vector<size_t> offsets(n);
  for (size_t i = 0; i < n; ++i) offsets[i] = i * sizeof(uint64_t);
  RingAllGather(reinterpret_cast<char*>(lengths_.data()), offsets,
                std::vector<size_t>(n, sizeof(uint64_t)), op, timeout_s);
}

void UcxCommunicator::Barrier() {
  Guarded([&] {
    lengths_.assign(static_cast<size_t>(size()), 0);
    GatherLengths("barrier", options_.timeout_s);
  });
}

std::unique_ptr<Communicator> MakeUcx(const CommOptions& options) {
  return CreateUcxCommunicator(options, nullptr);
}

}  // namespace

void RangeSum::Reset(float* dst, size_t bytes) {
  dst_ = dst;
  bytes_ = bytes;
  split_.clear();
}

void RangeSum::AddByte(size_t at, uint8_t byte) {
  const size_t index = at / sizeof(float);
  auto it =
      std::find_if(split_.begin(), split_.end(), [&](const Split& s) { return s.index == index; });
  if (it == split_.end()) {
    split_.push_back({index, {0, 0, 0, 0}, 0});
    it = split_.end() - 1;
  }
  it->bytes[at % sizeof(float)] = byte;
  it->have |= static_cast<uint8_t>(1u << (at % sizeof(float)));
  if (it->have == 0xF) {
    float value;
    std::memcpy(&value, it->bytes, sizeof(value));
    dst_[index] += value;
    split_.erase(it);
  }
}

bool RangeSum::Add(size_t offset, const void* src, size_t length) {
  if (offset > bytes_ || length > bytes_ - offset) return false;
  const auto* bytes = static_cast<const uint8_t*>(src);
  const size_t end = offset + length;
  // [first, last): the floats this range holds whole.
  const size_t first = std::min(end, (offset + sizeof(float) - 1) / sizeof(float) * sizeof(float));
  const size_t last = std::max(first, end / sizeof(float) * sizeof(float));
  for (size_t at = offset; at < first; ++at) AddByte(at, bytes[at - offset]);
  const uint8_t* whole = bytes + (first - offset);
  float* dst = dst_ + first / sizeof(float);
  const size_t n = (last - first) / sizeof(float);
  for (size_t k = 0; k < n; ++k) {
    float value;
    std::memcpy(&value, whole + k * sizeof(float), sizeof(value));
    dst[k] += value;
  }
  for (size_t at = last; at < end; ++at) AddByte(at, bytes[at - offset]);
  return true;
}

std::unique_ptr<Communicator> CreateUcxCommunicator(const CommOptions& options,
                                                    std::unique_ptr<TcpListener> listener) {
  if (options.world_size > 1 && static_cast<int>(options.peers.size()) != options.world_size) {
    CORTADO_THROW(kInvalidArgument,
                  "the ucx backend sets up through the peers' addresses: {} given for {} ranks",
                  options.peers.size(), options.world_size);
  }
  return std::make_unique<UcxCommunicator>(options, std::move(listener));
}

void LeaveErrorSignalsToTheRuntime() {
  const char* signals = std::getenv("UCX_ERROR_SIGNALS");
  // Empty before libucs loaded (libcortado_preload.so): it installed no handler to take back.
  if (signals != nullptr && *signals == '\0') return;
  ucs_global_opts_set_value("ERROR_SIGNALS", "");
  for (int signum : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) ucs_debug_disable_signal(signum);
}

CORTADO_REGISTER_COMMUNICATOR(ucx, MakeUcx);

}  // namespace cortado::comm
