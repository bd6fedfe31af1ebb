// SPDX-License-Identifier: Apache-2.0
// Trainer: data-parallel training on several devices of one process (Caffe's `caffe train
// --gpu=0,1`; DESIGN.md section 4).
//
// One Solver replica per device, each with its own Context, built and run on its own thread
// with its device made current first (device memory is allocated on the current device).
// Every replica is seeded from the same random_seed (one drawn for all when the solver sets
// none), so fillers and data layers draw alike; each replica's train net reads its own shard of
// the data (Net::SetDataShard: replica r of R reads batch k * R + r at its k-th forward).
// Replica 0, the root, logs, tests, snapshots and answers the action callback; the others run
// with display, test nets and snapshots off and log warnings and errors only.
//
// Synchronisation: every replica starts from root's parameters (broadcast at the start of
// Solve, after --weights were copied into root or each replica restored the same snapshot).
// After each iteration's backward the learnable parameters' gradients are summed over the
// replicas and scaled by 1/R (in Solver's on_gradients_ready hook, before regularisation,
// clipping and the update rule), so R replicas with batch b train like one with batch R * b,
// and every replica applies the same update. The sum goes through NCCL when the build has it
// and the devices are distinct, and through device copies otherwise (replicas sharing a GPU).
//
// Stopping: the action callback is polled by root only: at each gradient hook (before the
// replicas meet), at Solver's own polls after the update, and during root's test passes. A
// snapshot request is acted on at once by root. A stop request is published at the next
// gradient hook, and every replica leaves its loop after that iteration's update; a stop seen
// during a test pass lets the pass finish (a lone Solver interrupts it).
// Failures: the first exception of any replica aborts the others (no replica is left waiting)
// and is rethrown by Solve; the trainer cannot be used again afterwards.
//
// With a single device none of this applies: the trainer builds one plain Solver in the calling
// thread and Solve is Solver::Solve, with no threads and no hooks.
// A Trainer is used by one thread at a time.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "parallel/barrier.hpp"
#include "parallel/replica_sync.hpp"
#include "proto/caffe.pb.h"
#include "solvers/solver.hpp"

namespace cortado {

class Trainer {
 public:
  // Builds one replica per entry of `devices` (at least one). Several replicas need CUDA devices
  // (kInvalidArgument otherwise); a device may repeat, which puts several replicas on it. A
  // device that does not exist is an error naming it and the number of devices. Throws what
  // building a Solver throws. Leaves root's device current in the calling thread, so the caller
  // may work on root() (copy weights into it) before Solve.
  Trainer(const caffe::SolverParameter& param, const std::vector<Device>& devices);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  int num_replicas() const { return static_cast<int>(solvers_.size()); }
  Solver* root() const { return solvers_[0].get(); }
  Solver* replica(int rank) const { return solvers_.at(rank).get(); }
  // "nccl" or "device copies"; "none" with a single replica.
  const char* sync_name() const { return sync_ ? sync_->name() : "none"; }

  // Signals and time limits, polled by root (see above).
  void set_action_callback(Solver::ActionCallback callback);

  // Trains every replica to max_iter: each restores `resume_file` when given, all start from
  // root's parameters, and they train together. Rethrows the first failure of any replica
  // (naming the replica and its device); kAborted when called again after a failure.
  void Solve(const std::string& resume_file = "");

 private:
  // Runs body(rank) on one thread per replica, with the replica's device current and non-root
  // replicas quiet; the first exception aborts the barrier, and is rethrown after every thread
  // has been joined.
  template <typename F>
  void RunOnReplicas(F&& body);
  // Destroys the replicas, each with its device current; never throws.
  void Release() noexcept;
  void OnGradientsReady(int rank);
  SolverAction ReplicaAction(int rank);
  // Root only: polls the user's callback and records what it asks.
  void PollUser();

  std::vector<Device> devices_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::vector<std::unique_ptr<Solver>> solvers_;
  std::unique_ptr<Barrier> barrier_;
  std::unique_ptr<ReplicaSync> sync_;
  Solver::ActionCallback user_callback_;
  bool failed_ = false;

  // Stop and snapshot requests. pending_* are root's alone; stop_at_ is the iteration after whose
  // update every replica stops (-1: none), written by root before the replicas meet in the
  // gradient hook and read by all after it; stop_now_[r] is replica r's own copy for its poll.
  bool pending_stop_ = false;
  bool pending_snapshot_ = false;
  std::atomic<int> stop_at_{-1};
  std::vector<char> stop_now_;
};

}  // namespace cortado
