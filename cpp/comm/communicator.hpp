// SPDX-License-Identifier: Apache-2.0
// Communicator: the collectives between the processes of one training job (DESIGN.md section 4,
// docs/distributed.md). One interface, one backend per transport:
//   tcp   our own ring over sockets (comm/tcp/); several ranks may live in one process, each
//         with its own sockets;
//   mpi   OpenMPI, under mpirun or joined through ompi-server (comm/mpi/); one rank per process;
//   nccl  NCCL between GPUs of different processes (comm/nccl/); buffers are device memory.
// Backends register by name in core/registry.hpp's way; CreateCommunicator picks one.
//
// Every rank calls the same operations in the same order. An operation either completes on every
// rank or throws on every rank that reaches it (one exception: in tcp's recursive doubling a
// rank may still receive what a partner sent before that partner failed, complete the call, and
// fail at the next one): a peer that is gone, or that moves nothing for
// CommOptions::timeout_s, ends the call with kComm or kTimeout naming that peer's rank and host;
// Abort (from any thread) ends blocked and later calls with kAborted at once. After a failure the
// communicator is broken: every later call throws the first error again.
// One thread calls a communicator's operations at a time; Abort may come from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cortado::comm {

// How AllReduceAs carries the values between ranks: float32, or a 16-bit type (half the bytes).
enum class WireType { kFloat32, kBFloat16, kFloat16 };
const char* WireTypeName(WireType wire);  // "float32", "bfloat16", "float16"
// "float32", "bfloat16" or "float16" into *wire, "auto" into nullopt (the caller's default);
// false for anything else.
bool ParseWireType(const std::string& text, std::optional<WireType>* wire);

struct CommOptions {
  // "tcp", "mpi" or "nccl".
  std::string backend = "tcp";
  int rank = 0;
  int world_size = 1;
  // tcp: "host:port" of every rank, in rank order; this rank listens on its own entry's port
  // (unless a Listener is handed over) and connects to the others' hosts.
  std::vector<std::string> peers;
  // Every handshake carries the job's token and attempt; a peer with others is refused.
  std::string token;
  int attempt = 0;
  // Connection set-up retries until this many seconds have passed.
  double connect_timeout_s = 60;
  // An operation fails when no byte moved for this long (a hung or silent peer).
  double timeout_s = 120;
  // tcp: the pipelining unit of the ring (bytes received are summed in pieces of this size while
  // the next ones arrive).
  size_t chunk_bytes = size_t{1} << 20;
  // tcp and ucx: how AllReduce moves a buffer. "ring": always the ring. "doubling": always
  // recursive doubling, log2 N steps that each swap the whole buffer with one partner over
  // connections of its own (made while the communicator is built; a world that is not a power of
  // two first folds its last ranks into the first). "halving": recursive halving then doubling over
  // the same connections, 2 log2 N steps that move the ring's bytes (2 (N - 1) / N of the buffer,
  // in the wire's values: a 16-bit wire halves them, as for the ring; doubling always sends
  // float32).
  // "auto": the one whose modelled time is lowest, each step costing latency_bytes plus the
  // bytes it moves (ring: 2 (N - 1) steps of 1/N of the buffer; doubling: log2 N steps of all of
  // it, never above doubling_max_bytes; halving as said; folding: two steps of all of it).
  // latency_bytes is a step's fixed cost in bytes of the link's rate (its latency times its rate):
  // the default, 32 KiB, is 25 us at 10 Gbit/s; measured between network namespaces, 18-24 us at 10
  // Gbit/s and 12-40 us at 1 Gbit/s (bench/RESULTS.md, "Recursive doubling"), so on 1 Gbit/s links
  // about 3 KiB fits better.
  std::string allreduce_algorithm = "auto";
  size_t latency_bytes = size_t{32} << 10;
  size_t doubling_max_bytes = size_t{1} << 20;
  // tcp: when ranks share hosts (the same host in their peers entries) and there are two hosts
  // or more, AllReduce goes in three stages: the ranks of each host sum among themselves (a
  // ring over the host's own address), the first rank of each host sums with the other hosts'
  // (a ring, or doubling as above, of one rank per host), and hands the sum back to its host's
  // ranks. false: one ring of every rank.
  bool hierarchical = true;
  // tcp: the ports recursive doubling and the hierarchy's rings listen on (one per partner or
  // ring, on this rank's peers host):
  // the first free ones of first_port..last_port, as the peers' own for hosts whose firewalls
  // open a range; 0..0 for any free ephemeral port.
  int first_port = 0;
  int last_port = 0;
  // tcp: how messages name each rank, in rank order ("rank 3 (10.0.0.4:4000)" when empty).
  std::vector<std::string> rank_names;
  // mpi outside mpirun: the name of rank 0's port (MPI_Open_port), handed to the other ranks by
  // the caller's rendezvous; empty: the ranks meet through ompi-server's name service
  // (MPI_Publish_name under a service named after the token).
  std::string mpi_port;
  // nccl: this rank's CUDA device and rank 0's ncclUniqueId (its bytes), handed over by the
  // caller's rendezvous.
  int device = 0;
  std::string nccl_id;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // "tcp", "ucx", "mpi" or "nccl".
  virtual const char* backend() const = 0;
  // One line for the log: the backend, this rank and what carries its data (for ucx, the
  // transport of each connection, e.g. "tcp/eth0" or "rc_mlx5/mlx5_0:1"; for tcp, how
  // AllReduce goes: "tcp: rank 0 of 2; allreduce: doubling").
  virtual std::string Describe() const;
  // From any thread: what the operation in progress waits for, when no byte has moved for at
  // least `min_seconds`, as one line ("31 s for data from rank 1 (10.0.0.2:4000) during
  // allreduce"); empty otherwise, and from backends that cannot tell (all but tcp).
  virtual std::string WaitingOn(double min_seconds) const;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // data[0, count) becomes the sum over all ranks, in place. Host memory, device memory for nccl.
  // Every rank ends with bit-identical values.
  virtual void AllReduce(float* data, size_t count) = 0;
  // AllReduce with the values sent as `wire`: each rank's values, and each partial sum it
  // passes on, are rounded to `wire` (to nearest, ties to even) on the way; additions are in
  // float32. Every rank ends with the same values, each one a `wire` value, within `wire`'s
  // rounding (a relative 2^-8 for bfloat16, 2^-11 for float16, per rounding) of the exact sum;
  // a float16 sum beyond 65504 becomes infinite. A backend that cannot carry `wire`
  // (SupportsWire false) runs AllReduce.
  virtual void AllReduceAs(float* data, size_t count, WireType /*wire*/) { AllReduce(data, count); }
  virtual bool SupportsWire(WireType wire) const { return wire == WireType::kFloat32; }
  // data[0, bytes) becomes rank `root`'s.
  virtual void Broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's `mine` (any length, may differ between ranks), indexed by rank.
  virtual std::vector<std::string> AllGather(const std::string& mine) = 0;
  // Returns once every rank has called it.
  virtual void Barrier() = 0;
  // From any thread: ends every blocked and later call with kAborted carrying `reason`, and
  // closes the connections so that the peers' calls fail too. Idempotent; never throws.
  virtual void Abort(const std::string& reason) noexcept = 0;

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_;
  int size_;
};

// Builds the backend CommOptions::backend names (kInvalidArgument listing the known ones for an
// unknown name, or for a rank outside [0, world_size)); blocks until every rank has joined or
// connect_timeout_s has passed.
std::unique_ptr<Communicator> CreateCommunicator(const CommOptions& options);

// The backends this build has, sorted.
std::vector<std::string> CommunicatorBackends();

// What rank 0 must hand every other rank through the caller's rendezvous (Spark's allGather)
// before any rank calls CreateCommunicator: for mpi outside mpirun the name of the port rank 0
// opened (OpenMpiPort), for nccl a fresh ncclUniqueId (NewNcclId), for tcp nothing (empty).
// Called on rank 0 only. kInvalidArgument for a backend this build lacks.
std::string RootRendezvous(const std::string& backend);

// Stores what RootRendezvous gave rank 0 in `options` (every rank's, rank 0's included): the
// mpi port name or the NCCL id. Empty for tcp, and for mpi when the ranks meet through
// ompi-server's name service instead.
void SetRootRendezvous(const std::string& value, CommOptions* options);

// Registers a backend's RootRendezvous (see CORTADO_REGISTER_ROOT_RENDEZVOUS in registry.hpp).
struct RootRendezvousRegisterer {
  RootRendezvousRegisterer(const char* backend, std::string (*prepare)());
};

}  // namespace cortado::comm
