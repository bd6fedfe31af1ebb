// SPDX-License-Identifier: Apache-2.0
#include "parallel/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"

namespace cortado {
namespace {

#if CORTADO_WITH_CUDA
// Replica `rank`'s solver parameters: root's are the caller's; the others display nothing,
// build no test nets and write no snapshots.
caffe::SolverParameter ReplicaParam(const caffe::SolverParameter& param, int rank,
                                    const Device& device, int64_t seed) {
  caffe::SolverParameter p = param;
  p.set_device_id(device.id);
  p.set_random_seed(seed);
  if (rank > 0) {
    p.set_display(0);
    p.set_test_interval(0);
    p.clear_test_iter();
    p.clear_test_net();
    p.clear_test_net_param();
    p.clear_test_state();
    p.set_snapshot(0);
    p.set_snapshot_after_train(false);
  }
  return p;
}

// A non-negative seed for replicas of a solver without random_seed.
int64_t DrawSeed() {
  const auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
  return (static_cast<int64_t>(now) ^ static_cast<int64_t>(std::random_device{}())) & 0x7fffffff;
}
#endif

// The gradients the replicas sum: the diffs of the learnable parameters, on the replica's device.
std::vector<DeviceBuffer> GradientBuffers(Net* net) {
  std::vector<DeviceBuffer> buffers;
  for (Tensor* p : net->learnable_params()) buffers.push_back({p->mutable_gpu_diff(), p->count()});
  return buffers;
}

// Every parameter the net owns (shared ones once), learnable or not (BatchNorm statistics).
std::vector<DeviceBuffer> ParameterBuffers(Net* net) {
  std::vector<DeviceBuffer> buffers;
  const auto& params = net->params();
  for (size_t i = 0; i < params.size(); ++i) {
    if (net->param_owners()[i] >= 0) continue;
    buffers.push_back({params[i]->mutable_gpu_data(), params[i]->count()});
  }
  return buffers;
}

}  // namespace

template <typename F>
void Trainer::RunOnReplicas(F&& body) {
  const int n = num_replicas();
  std::mutex mutex;
  std::exception_ptr first;
  // Recorded before the barrier is aborted, so the failure that started it all comes first and
  // the kAborted errors it causes in the others come after.
  auto fail = [&](std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!first) first = std::move(error);
    }
    barrier_->Abort();
  };
  std::vector<std::thread> threads;
  threads.reserve(n);
  try {
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          SetThreadQuiet(r > 0);
          try {
            contexts_[r]->MakeCurrent();
            body(r);
          } catch (const Error& e) {
            throw Error(e.code(),
                        fmt::format("replica {} on {}: {}", r, devices_[r].ToString(), e.what()),
                        e.file(), e.line());
          }
        } catch (...) {
          fail(std::current_exception());
        }
      });
    }
  } catch (...) {
    fail(std::current_exception());  // a thread that could not start
  }
  for (auto& thread : threads) thread.join();
  if (first) {
    failed_ = true;
    if (sync_) sync_->Abort();
    std::rethrow_exception(first);
  }
}

Trainer::Trainer(const caffe::SolverParameter& param, const std::vector<Device>& devices)
    : devices_(devices) {
  if (devices_.empty()) CORTADO_THROW(kInvalidArgument, "a trainer needs at least one device");
  const int n = static_cast<int>(devices_.size());
  contexts_.resize(n);
  solvers_.resize(n);
  stop_now_.assign(n, 0);
  if (n == 1) {
    contexts_[0] = std::make_unique<Context>(devices_[0]);
    contexts_[0]->MakeCurrent();
    solvers_[0] = CreateSolver(param, contexts_[0].get());
    return;
  }
#if CORTADO_WITH_CUDA
  for (const Device& device : devices_) {
    if (!device.is_cuda()) {
      CORTADO_THROW(kInvalidArgument,
                    "data-parallel training with {} replicas needs CUDA devices, but one replica "
                    "is on {} (several CPU replicas are not supported)",
                    n, device.ToString());
    }
  }
  int64_t seed = param.random_seed();
  if (seed < 0) {
    seed = DrawSeed();
    CORTADO_LOG_INFO("random_seed is not set: the {} replicas share the seed {}", n, seed);
  }
  // Contexts first, in this thread: a device that does not exist fails here, by name.
  for (int r = 0; r < n; ++r) contexts_[r] = std::make_unique<Context>(devices_[r], seed);
  barrier_ = std::make_unique<Barrier>(n);
  try {
    RunOnReplicas([&](int rank) {
      solvers_[rank] =
          CreateSolver(ReplicaParam(param, rank, devices_[rank], seed), contexts_[rank].get());
      solvers_[rank]->net()->SetDataShard(rank, n);
    });
    std::vector<Context*> contexts;
    for (const auto& ctx : contexts_) contexts.push_back(ctx.get());
#if CORTADO_WITH_NCCL
    // NCCL takes one rank per device: replicas that share a GPU go through device copies.
    bool distinct = true;
    for (int r = 0; r < n; ++r) {
      for (int q = 0; q < r; ++q) distinct = distinct && devices_[q].id != devices_[r].id;
    }
    if (distinct) sync_ = CreateNcclSync(contexts, barrier_.get());
#endif
    if (!sync_) sync_ = CreateDeviceCopySync(contexts, barrier_.get());
    contexts_[0]->MakeCurrent();
  } catch (...) {
    Release();
    throw;
  }
  for (int r = 0; r < n; ++r) {
    solvers_[r]->set_on_gradients_ready([this, r] { OnGradientsReady(r); });
    solvers_[r]->set_action_callback([this, r] { return ReplicaAction(r); });
  }
  std::string names;
  for (const Device& device : devices_) names += (names.empty() ? "" : ", ") + device.ToString();
  CORTADO_LOG_INFO("Data-parallel training with {} replicas ({}); gradients are summed through {}",
                   n, names, sync_->name());
#else
  CORTADO_THROW(kUnimplemented,
                "data-parallel training with {} replicas needs CUDA, and this build of Cortado has "
                "no CUDA support (built without nvcc)",
                n);
#endif
}

Trainer::~Trainer() { Release(); }

void Trainer::Release() noexcept {
  sync_.reset();
  for (size_t r = solvers_.size(); r-- > 0;) {
    // Device memory is released with the replica's device current, as it was allocated.
    try {
      if (contexts_[r]) contexts_[r]->MakeCurrent();
    } catch (const std::exception& e) {
      CORTADO_LOG_ERROR("releasing replica {}: {}", r, e.what());
    }
    solvers_[r].reset();
    contexts_[r].reset();
  }
}

void Trainer::set_action_callback(Solver::ActionCallback callback) {
  if (num_replicas() == 1) {
    solvers_[0]->set_action_callback(std::move(callback));
  } else {
    user_callback_ = std::move(callback);
  }
}

void Trainer::Solve(const std::string& resume_file) {
  if (num_replicas() == 1) {
    solvers_[0]->Solve(resume_file);
    return;
  }
  if (failed_) {
    CORTADO_THROW(kAborted, "this trainer failed earlier and cannot train again; build a new one");
  }
  pending_stop_ = false;
  pending_snapshot_ = false;
  stop_at_.store(-1);
  std::fill(stop_now_.begin(), stop_now_.end(), 0);
  RunOnReplicas([&](int rank) {
    Solver* solver = solvers_[rank].get();
    if (!resume_file.empty()) solver->Restore(resume_file);
    sync_->Broadcast(rank, ParameterBuffers(solver->net()));
    solver->Solve();
  });
}

void Trainer::PollUser() {
  if (!user_callback_) return;
  const SolverAction action = user_callback_();
  if (action == SolverAction::kStop) pending_stop_ = true;
  if (action == SolverAction::kSnapshot) pending_snapshot_ = true;
}

void Trainer::OnGradientsReady(int rank) {
  Solver* solver = solvers_[rank].get();
  if (rank == 0) {
    PollUser();
    if (pending_stop_) stop_at_.store(solver->iter());
  }
  // AllReduce starts with a barrier: root's stop_at_ is visible to every replica after it.
  sync_->AllReduce(rank, GradientBuffers(solver->net()), 1.0f / static_cast<float>(num_replicas()));
  stop_now_[rank] = stop_at_.load() == solver->iter();
}

SolverAction Trainer::ReplicaAction(int rank) {
  if (stop_now_[rank]) return SolverAction::kStop;
  if (rank != 0) return SolverAction::kNone;
  PollUser();
  if (pending_snapshot_) {
    pending_snapshot_ = false;
    return SolverAction::kSnapshot;
  }
  return SolverAction::kNone;
}

}  // namespace cortado
