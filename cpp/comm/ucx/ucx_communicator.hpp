// SPDX-License-Identifier: Apache-2.0
// The ucx backend: the same ring as the tcp backend (reduce-scatter then all-gather, chunked and
// pipelined), with UCX carrying the data. UCX picks the transport of each connection:
// InfiniBand or RoCE verbs where a device is present, shared memory between processes of one
// host, TCP otherwise; UCX_TLS and UCX_NET_DEVICES narrow the choice as UCX documents them.
// AllReduce goes by the ring, recursive doubling or recursive halving as the tcp backend's does
// (CommOptions::allreduce_algorithm, latency_bytes, doubling_max_bytes; recursive.hpp), with the
// same steps and so the same bits; doubling and halving use endpoints of their own to each
// partner, made at set-up. (The tcp backend's hierarchy of hosts is not here.)
//
// Set-up goes through a tcp communicator on the same peers, token and attempt (its handshake
// refuses a peer of another job; see tcp_communicator.hpp): the ranks exchange their UCX worker
// addresses over it, connect to their next and previous ranks, and pass one message around the
// ring, so that every connection is made (or has failed, naming the rank) before
// CreateCommunicator returns. The log then says which transport each connection uses, and so
// does Describe().
//
// Errors: a peer that is gone (an endpoint error reported by UCX, a failed request) ends the
// call with kComm naming its rank and host; no completion for CommOptions::timeout_s ends it with
// kTimeout; Abort from any thread ends it with kAborted at once and closes the endpoints, so the
// peers' calls fail too. Requests still in flight are cancelled before the call throws, so UCX
// never writes into a caller's buffer afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/tcp_communicator.hpp"

namespace cortado::comm {

// Builds a ucx communicator whose set-up ring accepts its prev's connection on `listener` (as
// CreateTcpCommunicator; null: listen on options.peers[options.rank]). Blocks until every
// connection is made or options.connect_timeout_s has passed.
std::unique_ptr<Communicator> CreateUcxCommunicator(const CommOptions& options,
                                                    std::unique_ptr<TcpListener> listener);

// Adds a received buffer of floats into place from byte ranges of it that may come in any order
// and may split a float between two of them: how UCX unpacks a message over TCP, one receive
// segment at a time, into the ucx backend's summing receives. Each float is added once, when
// all four of its bytes have come, so the result is the same however the ranges fall.
class RangeSum {
 public:
  void Reset(float* dst, size_t bytes);
  size_t bytes() const { return bytes_; }
  // Adds the bytes [offset, offset + length) of the buffer, at `src`. False, adding nothing,
  // when they do not lie within it.
  bool Add(size_t offset, const void* src, size_t length);
  // Floats some but not all of whose bytes have come.
  size_t pending() const { return split_.size(); }

 private:
  void AddByte(size_t at, uint8_t byte);

  struct Split {
    size_t index;  // of the float in dst_
    uint8_t bytes[4];
    uint8_t have;  // bit b: byte b has come
  };
  float* dst_ = nullptr;
  size_t bytes_ = 0;
  std::vector<Split> split_;
};

// For a process whose runtime handles SIGSEGV itself (the JVM: its null checks and safepoints
// fault on purpose): UCX installs its own handlers for SIGSEGV, SIGBUS, SIGILL and SIGFPE when
// its library loads, which would turn those faults into crashes. Gives the signals back to the
// handlers that were there before UCX (the runtime's) and keeps UCX from installing them again.
// Call once, early (the JNI shim does in JNI_OnLoad).
void LeaveErrorSignalsToTheRuntime();

}  // namespace cortado::comm
