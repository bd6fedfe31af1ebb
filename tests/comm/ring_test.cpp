// SPDX-License-Identifier: Apache-2.0
// RingTransfer over socket pairs, driven by a hand-written peer: floats that arrive split
// between reads are summed whole, and a gated send forwards only what has been summed.
#include "comm/tcp/ring.hpp"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/tcp/socket.hpp"
#include "core/error.hpp"

namespace cortado::comm {
namespace {

struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    ours = UniqueFd(fds[0]);
    theirs = UniqueFd(fds[1]);
  }
  UniqueFd ours;
  UniqueFd theirs;
};

// Blocking helpers for the peer's side (its descriptors are nonblocking).
void WriteSlowly(int fd, const char* data, size_t bytes, size_t piece) {
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::send(fd, data + done, std::min(piece, bytes - done), MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      // Pacing only (not synchronisation): gives the reader a chance to see partial floats.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

std::vector<char> ReadAll(int fd, size_t bytes) {
  std::vector<char> out(bytes);
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::recv(fd, out.data() + done, bytes - done, 0);
    if (n > 0) done += static_cast<size_t>(n);
    if (n == 0) break;
  }
  return out;
}

TEST(TcpRingTransferTest, SumsFloatsSplitAcrossReadsAndForwardsOnlySums) {
  constexpr size_t kCount = 301;
  std::vector<float> data(kCount);
  std::vector<float> incoming(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    data[i] = static_cast<float>(i) * 0.25f;
    incoming[i] = 1000.0f + static_cast<float>(i);
  }
  Pair to_next;
  Pair from_prev;
  UniqueFd wake(::eventfd(0, EFD_NONBLOCK));
  RingLinks links;
  links.send_fd = to_next.ours.get();
  links.recv_fd = from_prev.ours.get();
  links.wake_fd = wake.get();
  links.next = "rank 1 (test)";
  links.prev = "rank 2 (test)";
  links.timeout_s = 10;

  // Chunks of 16 bytes, fed 3 bytes at a time: floats straddle every read.
  RingTransfer transfer(16);
  transfer.Reset();
  transfer.recvs().push_back({reinterpret_cast<char*>(data.data()), kCount * 4, true});
  transfer.sends().push_back({reinterpret_cast<char*>(data.data()), kCount * 4, 0});
  std::vector<char> forwarded;
  std::thread peer([&] {
    std::thread reader([&] { forwarded = ReadAll(to_next.theirs.get(), kCount * 4); });
    WriteSlowly(from_prev.theirs.get(), reinterpret_cast<const char*>(incoming.data()), kCount * 4,
                3);
    reader.join();
  });
  transfer.Run(links, "test");
  peer.join();
  ASSERT_EQ(forwarded.size(), kCount * 4);
  for (size_t i = 0; i < kCount; ++i) {
    const float want = static_cast<float>(i) * 0.25f + (1000.0f + static_cast<float>(i));
    EXPECT_EQ(data[i], want) << i;
    float sent;
    std::memcpy(&sent, forwarded.data() + i * 4, 4);
    EXPECT_EQ(sent, want) << "forwarded before it was summed: " << i;
  }
}

TEST(TcpRingTransferTest, PeerClosingMidTransferNamesItAndTheOperation) {
  Pair to_next;
  Pair from_prev;
  UniqueFd wake(::eventfd(0, EFD_NONBLOCK));
  RingLinks links{to_next.ours.get(), from_prev.ours.get(), wake.get(),
                  "rank 1 (a:1)",     "rank 2 (b:2)",       10};
  std::vector<char> buffer(1000);
  RingTransfer transfer(64);
  transfer.recvs().push_back({buffer.data(), buffer.size(), false});
  ASSERT_EQ(::send(from_prev.theirs.get(), "abc", 3, 0), 3);
  from_prev.theirs.Close();
  try {
    transfer.Run(links, "broadcast");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kComm);
    EXPECT_STREQ(e.what(), "rank 2 (b:2) closed the connection during broadcast");
  }
}

// Two ranks over one socket both ways (what the tcp backend does with N = 2): each side's
// allreduce pieces go out and come in on the same descriptor, interleaved, and both end with
// the sums. Chunks of 64 bytes against socket buffers of a few KiB: the two directions must make
// progress together, or both sides block on full sockets.
TEST(TcpRingTransferTest, TwoRanksShareOneSocketBothWays) {
  constexpr size_t kCount = 20000;  // 80 KB each way, far above a socketpair's buffer
  Pair pair;
  for (int fd : {pair.ours.get(), pair.theirs.get()}) {
    const int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  }
  std::vector<float> a(kCount), b(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    a[i] = static_cast<float>(i % 97) * 0.5f;
    b[i] = 3.0f - static_cast<float>(i % 89);
  }
  std::vector<float> want(kCount);
  for (size_t i = 0; i < kCount; ++i) want[i] = a[i] + b[i];
  // Rank r sends segment r ... the 2-rank ring: reduce-scatter sends segment (r), sums segment
  // (1 - r); all-gather sends the summed (1 - r), receives the summed (r).
  auto run = [&](int rank, int fd, std::vector<float>* data) {
    UniqueFd wake(::eventfd(0, EFD_NONBLOCK));
    RingLinks links{fd, fd, wake.get(), "rank 1 (x)", "rank 1 (x)", 10};
    RingTransfer transfer(64);
    const size_t half = kCount / 2;
    char* segment[2] = {reinterpret_cast<char*>(data->data()),
                        reinterpret_cast<char*>(data->data() + half)};
    const size_t bytes[2] = {half * 4, (kCount - half) * 4};
    const int mine = rank, other = 1 - rank;
    transfer.sends().push_back({segment[mine], bytes[mine], -1});
    transfer.recvs().push_back({segment[other], bytes[other], true});
    transfer.sends().push_back({segment[other], bytes[other], 0});
    transfer.recvs().push_back({segment[mine], bytes[mine], false});
    transfer.Run(links, "allreduce");
  };
  // The peer starts late: rank 0 fills the socket, stops spinning and sleeps in poll, and wakes
  // when the peer's first bytes arrive on the socket it also sends on.
  std::string peer_error;
  std::thread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    try {
      run(1, pair.theirs.get(), &b);
    } catch (const Error& e) {
      peer_error = e.what();
    }
  });
  std::string error;
  try {
    run(0, pair.ours.get(), &a);
  } catch (const Error& e) {
    error = e.what();
    pair.ours.Close();  // ends the peer's transfer too
  }
  peer.join();
  ASSERT_EQ(error, "");
  ASSERT_EQ(peer_error, "");
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(a[i], want[i]) << i;
    ASSERT_EQ(b[i], want[i]) << i;
  }
}

// On a shared socket a peer that closes it is seen by the receiving side at once, and a transfer
// that has only sends left learns it from send(): an error naming the peer, not a timeout.
TEST(TcpRingTransferTest, PeerClosingASharedSocketEndsSendsAndReceives) {
  UniqueFd wake(::eventfd(0, EFD_NONBLOCK));
  {
    Pair pair;
    RingLinks links{pair.ours.get(), pair.ours.get(), wake.get(),
                    "rank 1 (a:1)",  "rank 1 (a:1)",  10};
    std::vector<char> in(1000), out(1000, 'x');
    RingTransfer transfer(64);
    transfer.sends().push_back({out.data(), out.size(), -1});
    transfer.recvs().push_back({in.data(), in.size(), false});
    pair.theirs.Close();
    const auto start = std::chrono::steady_clock::now();
    try {
      transfer.Run(links, "allreduce");
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kComm) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 1 (a:1)"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
  {
    // Sends only, more than the socket holds: the closed peer surfaces through send().
    Pair pair;
    const int small = 4096;
    ::setsockopt(pair.ours.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    RingLinks links{pair.ours.get(), pair.ours.get(), wake.get(),
                    "rank 1 (a:1)",  "rank 1 (a:1)",  10};
    std::vector<char> out(1 << 20, 'x');
    RingTransfer transfer(4096);
    transfer.sends().push_back({out.data(), out.size(), -1});
    std::thread closer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      pair.theirs.Close();
    });
    const auto start = std::chrono::steady_clock::now();
    try {
      transfer.Run(links, "broadcast");
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kComm) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 1 (a:1)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("broadcast"), std::string::npos) << e.what();
    }
    closer.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
}

}  // namespace
}  // namespace cortado::comm
