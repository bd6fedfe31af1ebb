// SPDX-License-Identifier: Apache-2.0
// The tcp ring's handshake on the wire: everything the ranks send, recorded by a relay between
// them, never holds the job's token; a recorded handshake replayed to a rank of the same job and
// attempt is refused as another job's; connections that are not Cortado peers do not disturb
// the set-up. The byte offsets are the wire format of tcp_communicator.cpp's file comment.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/socket.hpp"
#include "comm/tcp/tcp_communicator.hpp"
#include "core/error.hpp"
#include "support/spawn_ranks.hpp"
#include "tcp_test_util.hpp"

namespace cortado::comm {
namespace {

using testing::Describe;
using testing::LoopbackRing;

constexpr size_t kFixedBytes = 80;  // a handshake message without its refusal reason
constexpr size_t kKindAt = 8;
constexpr size_t kLengthAt = 28;
constexpr size_t kNonceAt = 32;
constexpr size_t kMacAt = 48;

uint32_t U32At(const std::string& bytes, size_t at) {
  uint32_t be;
  std::memcpy(&be, bytes.data() + at, sizeof(be));
  return ntohl(be);
}

// A blocking loopback socket connected to `port`, with a 10 s receive timeout.
UniqueFd ConnectTo(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd.valid());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  timeval timeout{10, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

void SendAll(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

// Reads exactly `bytes` bytes (fewer when the peer closes or 10 s pass).
std::string RecvExactly(int fd, size_t bytes) {
  std::string data(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::recv(fd, &data[got], bytes - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

// Relays one connection from its own loopback port to `target_port` and records the bytes
// going each way, until both ends have closed (or 30 s pass).
class RecordingRelay {
 public:
  explicit RecordingRelay(int target_port) : listener_(TcpListener::Open("127.0.0.1", 0)) {
    thread_ = std::thread([this, target_port] { Run(target_port); });
  }
  ~RecordingRelay() {
    if (thread_.joinable()) thread_.join();
  }

  int port() const { return listener_->port(); }
  // Waits for the relay to end; then up() is what the connecting side sent, down() the answers.
  void Join() { thread_.join(); }
  const std::string& up() const { return up_; }
  const std::string& down() const { return down_; }

 private:
  void Run(int target_port) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    pollfd wait{listener_->fd(), POLLIN, 0};
    if (::poll(&wait, 1, 30000) != 1) return;
    UniqueFd client(::accept4(listener_->fd(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client.valid()) return;
    UniqueFd target = ConnectTo(target_port);
    // [0]: client -> target (up), [1]: target -> client (down).
    int from[2] = {client.get(), target.get()};
    int to[2] = {target.get(), client.get()};
    std::string* record[2] = {&up_, &down_};
    bool open[2] = {true, true};
    char buffer[65536];
    while ((open[0] || open[1]) && Clock::now() < deadline) {
      pollfd fds[2] = {{open[0] ? from[0] : -1, POLLIN, 0}, {open[1] ? from[1] : -1, POLLIN, 0}};
      if (::poll(fds, 2, 1000) < 0) return;
      for (int d = 0; d < 2; ++d) {
        if (!open[d] || fds[d].revents == 0) continue;
        const ssize_t n = ::recv(from[d], buffer, sizeof(buffer), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) {
          open[d] = false;
          ::shutdown(to[d], SHUT_WR);
          continue;
        }
        record[d]->append(buffer, static_cast<size_t>(n));
        if (::send(to[d], buffer, static_cast<size_t>(n), MSG_NOSIGNAL) != n) {
          open[d] = false;
          ::shutdown(to[d], SHUT_WR);
        }
      }
    }
  }

  std::unique_ptr<TcpListener> listener_;
  std::string up_;
  std::string down_;
  std::thread thread_;
};

constexpr char kToken[] = "job-secret-5b1f0c9e7d2a";

TEST(TcpHandshakeTest, TheTokenNeverTravels) {
  constexpr int kRanks = 3;
  LoopbackRing ring(kRanks);
  std::vector<std::unique_ptr<RecordingRelay>> relays;
  std::vector<std::string> relayed;
  for (int r = 0; r < kRanks; ++r) {
    const int port = std::stoi(ring.peers()[r].substr(ring.peers()[r].rfind(':') + 1));
    relays.push_back(std::make_unique<RecordingRelay>(port));
    relayed.push_back("127.0.0.1:" + std::to_string(relays.back()->port()));
  }
  const auto outcomes = testing::RunRanksAsThreads(kRanks, [&](int rank) {
    CommOptions options = ring.Options(rank);
    options.token = kToken;
    options.peers = relayed;  // every rank reaches its next through a relay
    auto comm = ring.Join(options);
    std::vector<float> data(10000, 1.0f);
    comm->AllReduce(data.data(), data.size());
    comm->AllGather("block of rank " + std::to_string(rank));
    comm->Barrier();
    return std::string();
  });
  ASSERT_TRUE(outcomes[0].ok && outcomes[1].ok && outcomes[2].ok) << Describe(outcomes);
  for (int r = 0; r < kRanks; ++r) {
    relays[r]->Join();
    const std::string& up = relays[r]->up();
    const std::string& down = relays[r]->down();
    // hello + confirm up, accept + ready down, then the data.
    ASSERT_GT(up.size(), 2 * kFixedBytes) << "relay " << r;
    ASSERT_GE(down.size(), 2 * kFixedBytes) << "relay " << r;
    EXPECT_EQ(up.substr(0, 4), "CRTD");
    EXPECT_EQ(down.substr(0, 4), "CRTD");
    EXPECT_EQ(U32At(up, kKindAt), 1u);                // hello
    EXPECT_EQ(U32At(down, kKindAt), 2u);              // accept
    EXPECT_EQ(U32At(up, kFixedBytes + kKindAt), 4u);  // confirm
    EXPECT_EQ(U32At(down, kFixedBytes + kKindAt), 5u);
    EXPECT_EQ(up.find(kToken), std::string::npos) << "rank " << (r + kRanks - 1) % kRanks;
    EXPECT_EQ(down.find(kToken), std::string::npos) << "rank " << r;
  }
}

// Records the handshake of a real rank 0 with a real rank 1 (same job and attempt as every
// ring of LoopbackRing): what rank 0 sent and what rank 1 answered.
void RecordHandshake(std::string* up, std::string* down) {
  LoopbackRing ring(2);
  const int port1 = std::stoi(ring.peers()[1].substr(ring.peers()[1].rfind(':') + 1));
  RecordingRelay relay(port1);
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    CommOptions options = ring.Options(rank);
    options.peers[1] = "127.0.0.1:" + std::to_string(relay.port());
    ring.Join(options)->Barrier();
    return std::string();
  });
  ASSERT_TRUE(outcomes[0].ok && outcomes[1].ok) << Describe(outcomes);
  relay.Join();
  ASSERT_GE(relay.up().size(), 2 * kFixedBytes);
  ASSERT_GE(relay.down().size(), 2 * kFixedBytes);
  *up = relay.up();
  *down = relay.down();
}

TEST(TcpHandshakeTest, ARecordedHandshakeReplayedIsRefused) {
  std::string up;
  std::string down;
  ASSERT_NO_FATAL_FAILURE(RecordHandshake(&up, &down));
  const std::string hello = up.substr(0, kFixedBytes);
  const std::string confirm = up.substr(kFixedBytes, kFixedBytes);
  const std::string accept = down.substr(0, kFixedBytes);
  for (const bool new_nonce : {false, true}) {
    SCOPED_TRACE(new_nonce ? "hello with a new nonce" : "the recorded hello");
    // A fresh rank 1 of the same job and attempt; its own next never answers.
    LoopbackRing ring(2);
    auto rank1 = std::async(std::launch::async, [&] {
      try {
        ring.Join(1);
      } catch (const Error& e) {
        return std::string(ErrorCodeName(e.code())) + ": " + e.what();
      }
      return std::string("joined");
    });
    const int port1 = std::stoi(ring.peers()[1].substr(ring.peers()[1].rfind(':') + 1));
    UniqueFd fd = ConnectTo(port1);
    std::string replayed_hello = hello;
    if (new_nonce) replayed_hello[kNonceAt] = static_cast<char>(replayed_hello[kNonceAt] ^ 0x5a);
    SendAll(fd.get(), replayed_hello);
    const std::string fresh_accept = RecvExactly(fd.get(), kFixedBytes);
    ASSERT_EQ(fresh_accept.size(), kFixedBytes);
    EXPECT_EQ(U32At(fresh_accept, kKindAt), 2u);
    // Rank 1 draws a new nonce, so the recorded MAC_c covers another transcript.
    EXPECT_NE(fresh_accept.substr(kNonceAt, 16), accept.substr(kNonceAt, 16));
    EXPECT_NE(fresh_accept.substr(kMacAt, 32), accept.substr(kMacAt, 32));
    SendAll(fd.get(), confirm);
    const std::string refusal = RecvExactly(fd.get(), kFixedBytes);
    ASSERT_EQ(refusal.size(), kFixedBytes);
    EXPECT_EQ(U32At(refusal, kKindAt), 3u);
    const std::string reason = RecvExactly(fd.get(), U32At(refusal, kLengthAt));
    EXPECT_NE(reason.find("belongs to another job (token mismatch)"), std::string::npos) << reason;
    const std::string outcome = rank1.get();
    EXPECT_NE(outcome.find("comm: rank 0 at 127.0.0.1:"), std::string::npos) << outcome;
    EXPECT_NE(outcome.find("belongs to another job (token mismatch)"), std::string::npos)
        << outcome;
  }
}

TEST(TcpHandshakeTest, StraysDoNotDisturbTheSetUp) {
  LoopbackRing ring(2);
  const int port1 = std::stoi(ring.peers()[1].substr(ring.peers()[1].rfind(':') + 1));
  // Before the ranks start: one stray says something else, one says nothing and stays.
  UniqueFd talker = ConnectTo(port1);
  SendAll(talker.get(), "GET / HTTP/1.0\r\n\r\n");
  UniqueFd silent = ConnectTo(port1);
  const auto start = Clock::now();
  const auto outcomes = testing::RunRanksAsThreads(2, [&](int rank) {
    auto comm = ring.Join(rank);
    float x = 1.0f;
    comm->AllReduce(&x, 1);
    return std::to_string(x);
  });
  ASSERT_TRUE(outcomes[0].ok && outcomes[1].ok) << Describe(outcomes);
  EXPECT_EQ(outcomes[0].result, "2.000000");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5)
      << "a silent stray must not hold up the set-up";
}

}  // namespace
}  // namespace cortado::comm
