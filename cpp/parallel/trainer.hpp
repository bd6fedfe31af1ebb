// SPDX-License-Identifier: Apache-2.0
// Trainer: the one training session. `cortado train` and the JNI shim (a Spark task) both build
// one and call it; nothing else runs a training loop (DESIGN.md section 4, docs/dev/training.md).
//
// Replicas: one Solver per device, each with its own Context, built and run on its own thread
// with its device made current first (replica 0, the root, runs on the calling thread, so the
// callbacks below arrive there). Devices are all CPUs or all CUDA devices; a CUDA device may
// repeat. Every replica is seeded from the same random_seed (one drawn for all when the solver
// sets none), so fillers and data layers draw alike; each replica's train net reads its own
// shard of the data (Net::SetDataShard: replica r of R reads batch k * R + r at its k-th
// forward), and a pushed feed (Feed) is filled per replica by its caller. The root logs, tests,
// snapshots and answers the action callback; the others run with display, test nets and
// snapshots off and log warnings and errors only.
//
// The gradient seam: every replica's Solver calls the trainer after each iteration's backward,
// before regularisation, clipping and the update rule, with one device too. There the learnable
// parameters' gradients are summed over the local replicas and scaled by 1/R (NCCL, device
// copies or host memory), the gradient hook (set_gradient_hook: the place of an inter-process
// allreduce) runs on the root over root's gradients, and the result is handed back to every
// replica. So R replicas with batch b train like one with batch R * b, and every replica applies
// the same update. Every replica starts from root's parameters (broadcast before the first
// iteration, after weights were copied into root or the replicas restored the same state).
//
// Processes: with a communicator of N ranks (TrainerOptions::comm), this process's R replicas
// are replicas rank * R ... rank * R + R - 1 of N * R: each reads its own shard of the data, the
// gradients summed over the local replicas are then summed over the ranks (GradientExchange,
// bucketed and overlapped with backward where it can be) and scaled by 1/N, and the loss every
// replica reports is the mean over all of them. Only rank 0 displays, tests and snapshots; every
// rank runs the same iterations. At the start of each Solve and Step every rank takes rank 0's
// weights and solver state when any rank's changed (fresh fillers, Restore, a resumed file:
// only rank 0 reads resume_file), so all ranks stay bit-identical in their parameters. A stop
// request on any rank stops every rank after the same iteration. Every rank must make the same
// calls (Solve, Step, Restore, TestAll is rank 0's alone).
//
// Cadence: Solve, Train and Step run Caffe's loop (Solver::Step): display every `display`
// iterations, test every `test_interval`, snapshot every `snapshot`; each is reported to the
// callbacks (set_on_display, set_on_test) and, with a snapshot sink, snapshots go there as
// bytes instead of files.
//
// Stopping: the action callback is polled by root only: at each gradient hook (before the
// replicas meet), at Solver's own polls after the update, and during root's test passes. A
// snapshot request is acted on at once by root. A stop request is published at the next
// gradient hook, and every replica leaves its loop after that iteration's update; a stop seen
// during a test pass lets the pass finish. Abort (any thread) stops the feeds and the loops at
// once; the call that was training then throws kAborted with the reason.
// Failures: the first exception of any replica aborts the others (no replica is left waiting)
// and is rethrown; the trainer cannot train again afterwards.
// RequestStopAt (any thread) asks every replica to stop once a given iteration is done, through
// the same gradient hook.
// A Trainer is used by one thread at a time, except Abort and RequestStopAt.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/context.hpp"
#include "data/batch_feed.hpp"
#include "net/net_options.hpp"
#include "parallel/barrier.hpp"
#include "parallel/gradient_exchange.hpp"
#include "parallel/replica_sync.hpp"
#include "parallel/session_info.hpp"
#include "proto/caffe.pb.h"
#include "solvers/solver.hpp"

namespace cortado {

// How the replicas' nets are built, and the processes this one trains with.
struct TrainerOptions {
  NetOptions net;
  // The job's other processes (DESIGN.md section 4, docs/distributed.md); null or of size 1:
  // this process trains alone. Shared with the caller, who built it; the trainer aborts it on
  // Abort and failures.
  std::shared_ptr<comm::Communicator> comm;
  ExchangeOptions exchange;
  // CPU threads for this process's share of the work (0: Context::NumThreads()); CPU replicas
  // divide them (at least one each).
  int cpu_threads = 0;
};

// The device a solver asks for: the CPU unless solver_mode is GPU (Caffe's default) and a CUDA
// device exists; then device_id. Without a CUDA device a GPU solver trains on the CPU, with a
// warning.
Device SolverDevice(const caffe::SolverParameter& param);

class Trainer {
 public:
  // Runs on root's thread over root's gradients, already summed over the local replicas and
  // scaled by 1/R; what it leaves in the buffers is what every replica applies. The gradients
  // are the net's flat diff buffer (Net::flat_diff: one DeviceBuffer of flat_diff_count()
  // floats, zero padding included), or one buffer per learnable parameter if a reshape broke
  // that layout. On a GPU the buffer's values are queued on root's stream, not yet final.
  using GradientHook = std::function<void(const std::vector<DeviceBuffer>& gradients)>;
  // A snapshot as bytes: .caffemodel and .solverstate (binary protos); the state names the model
  // by the file name of <snapshot_prefix>_iter_<iter>.caffemodel.
  using SnapshotSink =
      std::function<void(int iter, const std::string& model, const std::string& state)>;

  // Builds one replica per entry of `devices` (at least one). A device that does not exist is
  // an error naming it and the number of devices; CPU and CUDA devices may not mix. Throws what
  // building a Solver throws. Leaves root's device current in the calling thread, so the caller
  // may work on root() (copy weights into it) before training.
  Trainer(const caffe::SolverParameter& param, const std::vector<Device>& devices,
          const TrainerOptions& options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  int num_replicas() const { return static_cast<int>(solvers_.size()); }
  // Gives this process's share of the work `threads` CPU threads (0: Context::NumThreads()),
  // divided among CPU replicas (at least one each), from the next Solve or Step on; as
  // TrainerOptions::cpu_threads.
  void set_cpu_threads(int threads);
  // The OpenMP threads each replica computes with (1 on CUDA devices), as the OpenMP runtime
  // reports them in a thread that made root's context current.
  int cpu_threads_per_replica() const;
  Solver* root() const { return solvers_[0].get(); }
  Solver* replica(int rank) const { return solvers_.at(rank).get(); }
  // "nccl", "device copies" or "host memory"; "none" with a single replica.
  const char* sync_name() const { return sync_ ? sync_->name() : "none"; }
  // This process's rank and the number of ranks (0 and 1 without a communicator).
  int process_rank() const { return comm_ ? comm_->rank() : 0; }
  int num_processes() const { return comm_ ? comm_->size() : 1; }
  // The exchange between processes (null when training alone).
  const GradientExchange* exchange() const { return exchange_.get(); }

  // Signals and time limits, polled by root (see above).
  void set_action_callback(Solver::ActionCallback callback);
  void set_gradient_hook(GradientHook hook) { gradient_hook_ = std::move(hook); }
  // Root's display iterations and test passes (scores: root()->TestScores()).
  void set_on_display(std::function<void(const Display&)> callback);
  void set_on_test(std::function<void(int iter)> callback);
  // Snapshots go to `sink` instead of files (none written); unset: files, as Caffe.
  void set_snapshot_sink(SnapshotSink sink);

  // Trains every replica to max_iter (Caffe's Solver::Solve: the closing snapshot, display and
  // test included): each restores `resume_file` when given, all start from root's parameters.
  // Rethrows the first failure of any replica (naming the replica and its device); kAborted
  // after Abort, or when called again after a failure.
  void Solve(const std::string& resume_file = "");
  // Runs `iters` iterations with the same cadence, without the closing pass.
  void Step(int iters);
  // Runs root's test nets once; the scores are in root()->TestScores().
  void TestAll();

  // The model and the state, serialised as Solver::Snapshot writes binary-proto files; the
  // state names `learned_net` as its model.
  std::string ModelBytes() const;
  std::string StateBytes(const std::string& learned_net) const;
  // Every replica restores the state and the weights (bytes of a .solverstate and a
  // .caffemodel; errors name `source`). A null `state` copies the weights alone into root's
  // nets (fine-tuning); every replica starts from them.
  void Restore(const std::string& model, const std::string* state, const std::string& source);

  // The feed of layer `layer` ("TRAIN/data", "TEST/data", or a plain name meaning the TRAIN
  // net's, else the TEST net's) of replica `replica`; kNotFound lists the replica's feeds.
  std::shared_ptr<BatchFeed> Feed(int replica, const std::string& layer) const;
  // Replica `replica`'s feed layers, qualified by phase, sorted.
  std::vector<std::string> FeedLayers(int replica) const;

  // From any thread: every replica stops once `iter` iterations are done (restored ones
  // counted), or after the iteration in progress when that many are done already; Solve then
  // takes its closing snapshot (snapshot_after_train) as after any stop. A negative `iter`
  // withdraws the request. Kept across Solve and Step calls.
  void RequestStopAt(int iter) { stop_request_.store(iter); }
  int stop_request() const { return stop_request_.load(); }

  // From any thread: aborts every feed with `reason` and makes the replicas leave their loops;
  // the training call throws kAborted with `reason`. Idempotent (the first reason is kept).
  void Abort(const std::string& reason);
  bool aborted() const { return aborted_.load(); }

 private:
  // Runs body(rank) for every replica, root on the calling thread and the others on threads of
  // their own, each with its device current and non-root replicas quiet; the first exception
  // aborts the barrier, and is rethrown once every thread has been joined.
  template <typename F>
  void RunOnReplicas(F&& body);
  // Throws kAborted after Abort or a failure.
  void CheckUsable() const;
  // Every replica takes root's parameters, once before the first iteration after a change.
  void BroadcastParameters(int rank);
  // Destroys the replicas, each with its device current; never throws.
  void Release() noexcept;
  void OnGradientsReady(int rank, float* loss);
  // Every rank takes rank 0's weights and solver state if any rank's changed (see above).
  void SyncProcesses();
  SolverAction ReplicaAction(int rank);
  // Root only: polls the user's callback and records what it asks.
  void PollUser();
  void WriteSnapshotToSink();
  // The feeds of replica `replica`'s nets (AppendFeeds).
  std::vector<NamedFeed> Feeds(int replica) const;

  std::vector<Device> devices_;
  std::vector<std::unique_ptr<Context>> contexts_;
  std::vector<std::unique_ptr<Solver>> solvers_;
  std::unique_ptr<Barrier> barrier_;
  std::unique_ptr<ReplicaSync> sync_;
  std::shared_ptr<comm::Communicator> comm_;
  std::unique_ptr<GradientExchange> exchange_;
  // Whether this process's parameters or state changed since the ranks last agreed.
  bool process_state_changed_ = true;
  // Each replica's loss of an iteration, for the mean: [parity of the iteration][replica].
  std::vector<float> losses_;
  Solver::ActionCallback user_callback_;
  GradientHook gradient_hook_;
  SnapshotSink snapshot_sink_;
  bool failed_ = false;
  bool parameters_synced_ = false;

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;

  // Stop and snapshot requests. pending_* are root's alone; stop_at_ is the iteration after whose
  // update every replica stops (-1: none), written by root before the replicas meet in the
  // gradient hook and read by all after it; stop_now_[r] is replica r's own copy for its poll.
  bool pending_stop_ = false;
  bool pending_snapshot_ = false;
  std::atomic<int> stop_at_{-1};
  // RequestStopAt's iteration, read by root at each gradient hook; -1: none.
  std::atomic<int> stop_request_{-1};
  std::vector<char> stop_now_;
};

}  // namespace cortado
