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

}  // namespace
}  // namespace cortado::comm
