// SPDX-License-Identifier: Apache-2.0
// The data path of the tcp backend: one transfer around the ring, in one thread, over two
// nonblocking sockets (to the next rank and from the previous one) and poll().
//
// A transfer is two streams of pieces: the pieces this rank sends to its next rank, in order,
// and the pieces it receives from its previous rank, in order. A received piece is either
// copied into place or summed (as floats) into place through a staging buffer of chunk_bytes.
// A sent piece may be gated on a received piece: then only the bytes of that piece that have
// already arrived (and, for a summed piece, been summed) may go out. That is what pipelines
// the ring: in AllReduce, the segment received at step t is the one sent at step t + 1, so
// receiving, summing and sending overlap within and across steps.
//
// Failures throw cortado::Error naming the peer and the operation: kComm when a peer closes its
// connection, kTimeout when no byte moved for timeout_s, and kAborted when the wake-up
// descriptor becomes readable (the communicator replaces that one with Abort's reason).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace cortado::comm {

// The sizes of N segments that split `count` elements as evenly as possible (the first
// count % N are one longer), and where each begins.
struct RingSegments {
  RingSegments(size_t count, int n) : count_(count), n_(static_cast<size_t>(n)) {}
  size_t begin(int i) const {
    const size_t k = static_cast<size_t>(i);
    return k * (count_ / n_) + std::min(k, count_ % n_);
  }
  size_t size(int i) const { return count_ / n_ + (static_cast<size_t>(i) < count_ % n_ ? 1 : 0); }

 private:
  size_t count_;
  size_t n_;
};

// What a transfer in progress waits for, readable from any thread (a driver's stall report):
// since_ns, on the steady clock, is when it last found nothing to move and began to poll (0:
// not waiting); on_prev says whether it waits for data from the previous rank (else for the
// next rank to take data); op names the operation.
struct RingWait {
  std::atomic<int64_t> since_ns{0};
  std::atomic<bool> on_prev{false};
  std::atomic<const char*> op{""};
};

// What a transfer runs over; the descriptors are borrowed.
struct RingLinks {
  int send_fd = -1;  // to the next rank
  int recv_fd = -1;  // from the previous rank; may be send_fd (one socket both ways)
  int wake_fd = -1;  // readable once the communicator is aborted
  std::string next;  // "rank 1 (10.0.0.2:4000)"
  std::string prev;
  double timeout_s = 120;
  RingWait* wait = nullptr;  // kept up to date by Run when set
};

class RingTransfer {
 public:
  struct SendPiece {
    const char* data;
    size_t bytes;
    // The received piece whose progress bounds this one (its bytes must have arrived and been
    // summed before they go out), or -1 for none. Gates must not decrease along the stream.
    int gate;
  };
  struct RecvPiece {
    char* data;  // aligned to the wire's values when `sum`
    size_t bytes;
    bool sum;  // add the received values into data; else copy the bytes there
    // With a 16-bit wire (set_wire) a summed piece's data holds wire values: each received value
    // is added to the float32 at the same place in `accumulate`, and the sum, rounded to the wire
    // type, is written to data.
    const float* accumulate = nullptr;
  };

  // `chunk_bytes`: the staging buffer (rounded down to whole floats, at least one float) and
  // the most one receive call takes.
  explicit RingTransfer(size_t chunk_bytes);
  RingTransfer(const RingTransfer&) = delete;
  RingTransfer& operator=(const RingTransfer&) = delete;

  // The values summed pieces carry: float32 (the default), or a 16-bit type; set before Run.
  void set_wire(WireType wire) { wire_ = wire; }
  // Bytes of one value on the wire.
  size_t WireBytes() const {
    return wire_ == WireType::kFloat32 ? sizeof(float) : sizeof(uint16_t);
  }

  // The streams of the next Run; cleared (keeping their capacity) by Reset.
  void Reset();
  std::vector<SendPiece>& sends() { return sends_; }
  std::vector<RecvPiece>& recvs() { return recvs_; }
  // Called when received piece i is complete, before anything gated on it is sent; it may
  // fill in later pieces (AllGather learns a block's length from the piece before it).
  void set_on_received(std::function<void(size_t)> on_received) {
    on_received_ = std::move(on_received);
  }

  // Moves both streams to the end. `op` names the operation in error messages.
  void Run(const RingLinks& links, const char* op);

 private:
  // Sends what the gates allow; false when nothing could be sent.
  bool TrySend(const RingLinks& links, const char* op);
  // One receive call; false when nothing arrived.
  bool TryRecv(const RingLinks& links, const char* op);
  // Sums the whole floats in staging into the current piece.
  void SumStaged();
  // Bytes of received piece i that sends gated on it may use.
  size_t Usable(int i) const;
  // Moves past finished pieces.
  void Advance();
  [[noreturn]] void ThrowClosed(const std::string& peer, int err, const char* op) const;

  std::vector<float> staging_;
  size_t staging_bytes_;
  WireType wire_ = WireType::kFloat32;
  std::vector<SendPiece> sends_;
  std::vector<RecvPiece> recvs_;
  std::function<void(size_t)> on_received_;

  // Progress of the current Run.
  size_t send_index_ = 0;
  size_t sent_ = 0;  // bytes of sends_[send_index_] sent
  size_t recv_index_ = 0;
  size_t received_ = 0;  // bytes of recvs_[recv_index_] read from the socket
  size_t summed_ = 0;    // bytes of a summed piece added into place (received_ - summed_ staged)
};

}  // namespace cortado::comm
