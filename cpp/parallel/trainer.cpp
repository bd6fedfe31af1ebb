// SPDX-License-Identifier: Apache-2.0
#include "parallel/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <random>
#include <thread>
#include <utility>

#include "core/config.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "parallel/session_info.hpp"

namespace cortado {
namespace {

// A replica's solver parameters: root's of rank 0 are the caller's; the others (`quiet`)
// display nothing, build no test nets and write no snapshots.
caffe::SolverParameter ReplicaParam(const caffe::SolverParameter& param, bool quiet,
                                    const Device& device, int64_t seed) {
  caffe::SolverParameter p = param;
  if (device.is_cuda()) p.set_device_id(device.id);
  p.set_random_seed(seed);
  if (quiet) {
    p.set_display(0);
    ClearTestNets(&p);
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

// The batch size of a net's first layer when it is a data layer (no bottoms), else 0.
int FirstBatchSize(const Net& net) {
  if (net.layers().empty() || !net.bottom_vecs()[0].empty() || net.top_vecs()[0].empty()) {
    return 0;
  }
  const Tensor* top = net.top_vecs()[0][0];
  return top->num_axes() > 0 ? top->shape(0) : 0;
}

// The memory of a tensor on its replica's device: the GPU copy for a CUDA replica, the host
// copy for a CPU one.
float* MutableDiffOn(Tensor* t, const Device& device) {
  return device.is_cuda() ? t->mutable_gpu_diff() : t->mutable_cpu_diff();
}
float* MutableDataOn(Tensor* t, const Device& device) {
  return device.is_cuda() ? t->mutable_gpu_data() : t->mutable_cpu_data();
}

// The gradients the replicas sum: the learnable parameters' diffs as the net's one flat buffer
// (padding included), or one buffer per parameter when a reshape broke the flat layout.
std::vector<DeviceBuffer> GradientBuffers(Net* net, const Device& device) {
  if (net->flat_diff() != nullptr) {
    try {
      float* flat = device.is_cuda() ? net->mutable_flat_gpu_diff() : net->mutable_flat_cpu_diff();
      return {{flat, static_cast<int>(net->flat_diff_count())}};
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInternal) throw;
      CORTADO_LOG_WARN_ONCE("{}: the gradients are no longer one buffer; summing them one by one",
                            net->name());
    }
  }
  std::vector<DeviceBuffer> buffers;
  for (Tensor* p : net->learnable_params()) {
    buffers.push_back({MutableDiffOn(p, device), p->count()});
  }
  return buffers;
}

// Every parameter the net owns (shared ones once), learnable or not (BatchNorm statistics).
std::vector<DeviceBuffer> ParameterBuffers(Net* net, const Device& device) {
  std::vector<DeviceBuffer> buffers;
  const auto& params = net->params();
  for (size_t i = 0; i < params.size(); ++i) {
    if (net->param_owners()[i] >= 0) continue;
    buffers.push_back({MutableDataOn(params[i].get(), device), params[i]->count()});
  }
  return buffers;
}

}  // namespace

Device SolverDevice(const caffe::SolverParameter& param) {
  if (param.solver_mode() != caffe::SolverParameter::GPU) return Device::Cpu();
  if (Context::CudaDeviceCount() > 0) return Device::Cuda(param.device_id());
  CORTADO_LOG_WARN_ONCE(
      "solver_mode is GPU but this build or machine has no CUDA device; training on the CPU");
  return Device::Cpu();
}

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
    if (barrier_) barrier_->Abort();
  };
  auto run = [&](int r) {
    try {
      contexts_[r]->MakeCurrent();
      if (n == 1) {
        body(r);
      } else {
        WithContext(fmt::format("replica {} on {}", r, devices_[r].ToString()), [&] { body(r); });
      }
    } catch (...) {
      fail(std::current_exception());
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(n > 0 ? n - 1 : 0);
  try {
    for (int r = 1; r < n; ++r) {
      threads.emplace_back([&, r] {
        SetThreadQuiet(true);
        run(r);
      });
    }
  } catch (...) {
    fail(std::current_exception());  // a thread that could not start
  }
  if (!first) run(0);
  for (auto& thread : threads) thread.join();
  if (n > 1) contexts_[0]->MakeCurrent();
  if (first) {
    // Replicas that failed apart leave the barrier aborted, and a failed exchange the
    // communicator broken: no second try with them.
    if (n > 1 || comm_) failed_ = true;
    if (sync_) sync_->Abort();
    if (exchange_) {
      // The other ranks fail at once rather than at their timeout.
      std::string what = "unknown error";
      try {
        std::rethrow_exception(first);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      exchange_->Abort(fmt::format("rank {} failed: {}", process_rank(), what));
    }
    if (aborted_.load()) {
      std::lock_guard<std::mutex> lock(abort_mutex_);
      CORTADO_THROW(kAborted, "training aborted: {}", abort_reason_);
    }
    std::rethrow_exception(first);
  }
}

void Trainer::set_cpu_threads(int threads) {
  CORTADO_CHECK_GE(threads, 0);
  // CPU replicas share the process's threads rather than each taking all of them.
  const int share = threads > 0 ? threads : Context::NumThreads();
  const int n = static_cast<int>(contexts_.size());
  for (auto& ctx : contexts_) {
    if (ctx->device().is_cpu()) ctx->set_cpu_threads(std::max(1, share / n));
  }
}

int Trainer::cpu_threads_per_replica() const {
  if (!devices_[0].is_cpu()) return 1;
  int threads = 0;
  std::thread([&] {
    contexts_[0]->MakeCurrent();
    threads = omp_get_max_threads();
  }).join();
  return threads;
}

Trainer::Trainer(const caffe::SolverParameter& param, const std::vector<Device>& devices,
                 const TrainerOptions& options)
    : devices_(devices) {
  if (devices_.empty()) CORTADO_THROW(kInvalidArgument, "a trainer needs at least one device");
  const int n = static_cast<int>(devices_.size());
  if (options.comm && options.comm->size() > 1) comm_ = options.comm;
  const int world = num_processes();
  const int process = process_rank();
  for (const Device& device : devices_) {
    if (device.type != devices_[0].type) {
      CORTADO_THROW(kInvalidArgument,
                    "the replicas of a trainer are all on CPUs or all on CUDA devices, not on "
                    "both ({} and {})",
                    devices_[0].ToString(), device.ToString());
    }
  }
  contexts_.resize(n);
  solvers_.resize(n);
  stop_now_.assign(n, 0);
  int64_t seed = param.random_seed();
  if ((n > 1 || comm_) && seed < 0) {
    seed = DrawSeed();
    // Every rank takes rank 0's, so that the shards of the data are drawn alike.
    if (comm_) comm_->Broadcast(&seed, sizeof(seed), 0);
    CORTADO_LOG_INFO("random_seed is not set: the {} replicas share the seed {}", n * world, seed);
  }
  // Contexts first, in this thread: a device that does not exist fails here, by name.
  for (int r = 0; r < n; ++r) {
    contexts_[r] = n == 1 && !comm_ ? std::make_unique<Context>(devices_[r])
                                    : std::make_unique<Context>(devices_[r], seed);
  }
  set_cpu_threads(options.cpu_threads);
  barrier_ = std::make_unique<Barrier>(n);
  try {
    if (n == 1) {
      contexts_[0]->MakeCurrent();
      caffe::SolverParameter p = param;
      if (devices_[0].is_cuda()) p.set_device_id(devices_[0].id);
      if (comm_) p = ReplicaParam(param, process > 0, devices_[0], seed);
      solvers_[0] = CreateSolver(p, contexts_[0].get(), options.net);
      if (comm_) solvers_[0]->net()->SetDataShard(process, world);
    } else {
      RunOnReplicas([&](int rank) {
        solvers_[rank] =
            CreateSolver(ReplicaParam(param, rank > 0 || process > 0, devices_[rank], seed),
                         contexts_[rank].get(), options.net);
        solvers_[rank]->net()->SetDataShard(process * n + rank, world * n);
      });
      if (devices_[0].is_cpu()) {
        sync_ = CreateHostSync(n, barrier_.get());
      } else {
#if CORTADO_WITH_CUDA
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
#endif
      }
      contexts_[0]->MakeCurrent();
    }
  } catch (...) {
    Release();
    throw;
  }
  if (comm_) {
    try {
      exchange_ = std::make_unique<GradientExchange>(comm_.get(), root()->net(), contexts_[0].get(),
                                                     param.iter_size(),
                                                     /*overlap=*/n == 1, options.exchange);
    } catch (...) {
      Release();
      throw;
    }
    const int batch = FirstBatchSize(*root()->net());
    CORTADO_LOG_INFO(
        "Distributed training: {} processes through {}, {} replica{} each; batch {} per replica, "
        "{} in all",
        world, comm_->backend(), n, n == 1 ? "" : "s", batch, batch * n * world);
    CORTADO_LOG_INFO("Connection: {}", comm_->Describe());
  }
  losses_.assign(2 * n, 0.0f);
  for (int r = 0; r < n; ++r) {
    solvers_[r]->set_on_gradients_ready([this, r](float* loss) { OnGradientsReady(r, loss); });
    solvers_[r]->set_action_callback([this, r] { return ReplicaAction(r); });
  }
  if (n > 1) {
    std::string names;
    for (const Device& device : devices_) names += (names.empty() ? "" : ", ") + device.ToString();
    CORTADO_LOG_INFO(
        "Data-parallel training with {} replicas ({}); gradients are summed through {}", n, names,
        sync_->name());
  }
}

Trainer::~Trainer() {
  // Not the communicator: the caller may close it as the other ranks finish their last reads.
  exchange_.reset();
  // Feeds first: a pusher blocked on a full feed returns before the nets go away.
  Abort("the training session was closed");
  Release();
}

void Trainer::Release() noexcept {
  exchange_.reset();
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
  user_callback_ = std::move(callback);
}

void Trainer::set_on_display(std::function<void(const Display&)> callback) {
  root()->set_on_display(std::move(callback));
}

void Trainer::set_on_test(std::function<void(int iter)> callback) {
  root()->set_on_test(std::move(callback));
}

void Trainer::set_snapshot_sink(SnapshotSink sink) {
  snapshot_sink_ = std::move(sink);
  if (snapshot_sink_) {
    root()->set_snapshot_writer([this] { WriteSnapshotToSink(); });
  } else {
    root()->set_snapshot_writer(nullptr);
  }
}

void Trainer::WriteSnapshotToSink() {
  Solver* solver = root();
  const std::string model_file =
      std::filesystem::path(solver->SnapshotFilename(".caffemodel")).filename().string();
  snapshot_sink_(solver->iter(), ModelBytes(), StateBytes(model_file));
}

void Trainer::CheckUsable() const {
  if (aborted_.load()) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    CORTADO_THROW(kAborted, "training aborted: {}", abort_reason_);
  }
  if (failed_) {
    CORTADO_THROW(kAborted, "this trainer failed earlier and cannot train again; build a new one");
  }
}

void Trainer::BroadcastParameters(int rank) {
  if (!sync_) return;
  sync_->Broadcast(rank, ParameterBuffers(solvers_[rank]->net(), devices_[rank]));
}

void Trainer::Solve(const std::string& resume_file) {
  CheckUsable();
  pending_stop_ = false;
  pending_snapshot_ = false;
  stop_at_.store(-1);
  std::fill(stop_now_.begin(), stop_now_.end(), 0);
  // With other processes, rank 0 alone reads the file and the others take its state.
  const bool restore = !resume_file.empty() && process_rank() == 0;
  if (restore && comm_) {
    RunOnReplicas([&](int rank) { solvers_[rank]->Restore(resume_file); });
    process_state_changed_ = true;
  }
  SyncProcesses();
  RunOnReplicas([&](int rank) {
    Solver* solver = solvers_[rank].get();
    if (restore && !comm_) solver->Restore(resume_file);
    BroadcastParameters(rank);
    solver->Solve();
  });
  parameters_synced_ = true;
  CheckUsable();
}

void Trainer::Step(int iters) {
  CheckUsable();
  if (iters < 0) CORTADO_THROW(kInvalidArgument, "cannot train {} iterations", iters);
  pending_stop_ = false;
  pending_snapshot_ = false;
  stop_at_.store(-1);
  std::fill(stop_now_.begin(), stop_now_.end(), 0);
  SyncProcesses();
  const bool broadcast = !parameters_synced_;
  RunOnReplicas([&](int rank) {
    if (broadcast) BroadcastParameters(rank);
    solvers_[rank]->Step(iters);
  });
  parameters_synced_ = true;
  CheckUsable();
}

void Trainer::TestAll() {
  CheckUsable();
  contexts_[0]->MakeCurrent();
  root()->TestAll();
}

std::string Trainer::ModelBytes() const {
  std::string bytes;
  if (!root()->ModelProto().SerializeToString(&bytes)) {
    CORTADO_THROW(kInvalidArgument, "cannot serialise the model (over 2 GiB?)");
  }
  return bytes;
}

std::string Trainer::StateBytes(const std::string& learned_net) const {
  std::string bytes;
  if (!root()->StateProto(learned_net).SerializeToString(&bytes)) {
    CORTADO_THROW(kInvalidArgument, "cannot serialise the solver state (over 2 GiB?)");
  }
  return bytes;
}

void Trainer::Restore(const std::string& model, const std::string* state,
                      const std::string& source) {
  CheckUsable();
  caffe::NetParameter weights;
  if (!weights.ParseFromString(model)) {
    CORTADO_THROW(kParse, "{}: the model bytes are not a binary NetParameter (.caffemodel)",
                  source);
  }
  if (state == nullptr) {
    contexts_[0]->MakeCurrent();
    WithContext(source, [&] {
      root()->net()->CopyTrainedLayersFrom(weights);
      for (const auto& test_net : root()->test_nets()) test_net->CopyTrainedLayersFrom(weights);
    });
  } else {
    caffe::SolverState solver_state;
    if (!solver_state.ParseFromString(*state)) {
      CORTADO_THROW(kParse, "{}: the state bytes are not a binary SolverState (.solverstate)",
                    source);
    }
    RunOnReplicas([&](int rank) {
      solvers_[rank]->Restore(solver_state, weights, source + " (solver state)",
                              source + " (model)");
    });
  }
  parameters_synced_ = false;
  process_state_changed_ = true;
}

std::vector<NamedFeed> Trainer::Feeds(int replica) const {
  if (replica < 0 || replica >= num_replicas()) {
    CORTADO_THROW(kInvalidArgument, "replica {} does not exist (the session has {})", replica,
                  num_replicas());
  }
  std::vector<NamedFeed> feeds;
  const Solver* solver = solvers_[replica].get();
  AppendFeeds(*solver->net(), &feeds);
  for (const auto& test_net : solver->test_nets()) AppendFeeds(*test_net, &feeds);
  return feeds;
}

std::shared_ptr<BatchFeed> Trainer::Feed(int replica, const std::string& layer) const {
  return FindFeed(Feeds(replica), layer, fmt::format("replica {}", replica));
}

std::vector<std::string> Trainer::FeedLayers(int replica) const {
  return FeedNames(Feeds(replica));
}

void Trainer::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true);
  }
  // The solvers stay alive while this runs: the owner destroys them only after Abort returns.
  for (int r = 0; r < num_replicas(); ++r) {
    if (!solvers_[r]) continue;
    for (const auto& entry : Feeds(r)) entry.second->Abort(reason);
  }
  if (barrier_) barrier_->Abort();
  if (exchange_) exchange_->Abort("rank " + std::to_string(process_rank()) + ": " + reason);
}

void Trainer::SyncProcesses() {
  if (!comm_) return;
  CheckUsable();
  contexts_[0]->MakeCurrent();
  float changed = process_state_changed_ ? 1.0f : 0.0f;
  exchange_->AllReduceHost(&changed, 1);
  if (changed > 0.0f) {
    // Rank 0's model and state as bytes (a .caffemodel and a .solverstate), sizes first.
    std::string model;
    std::string state;
    if (process_rank() == 0) {
      model = ModelBytes();
      state = StateBytes("rank 0");
    }
    uint64_t sizes[2] = {model.size(), state.size()};
    comm_->Broadcast(sizes, sizeof(sizes), 0);
    model.resize(sizes[0]);
    state.resize(sizes[1]);
    comm_->Broadcast(model.data(), model.size(), 0);
    comm_->Broadcast(state.data(), state.size(), 0);
    if (process_rank() != 0) Restore(model, &state, "rank 0's model and state");
  }
  process_state_changed_ = false;
}

void Trainer::PollUser() {
  if (aborted_.load()) pending_stop_ = true;
  if (!user_callback_) return;
  const SolverAction action = user_callback_();
  if (action == SolverAction::kStop) pending_stop_ = true;
  if (action == SolverAction::kSnapshot) pending_snapshot_ = true;
}

void Trainer::OnGradientsReady(int rank, float* loss) {
  Solver* solver = solvers_[rank].get();
  if (rank == 0) {
    PollUser();
    // Iteration iter() is in progress: stopping after it leaves iter() + 1 done.
    const int requested = stop_request_.load();
    if (requested >= 0 && solver->iter() + 1 >= requested) pending_stop_ = true;
    if (pending_stop_) stop_at_.store(solver->iter());
  }
  // By the parity of the iteration: a replica that has left this iteration's last barrier may
  // write its next loss before root has read this one.
  const int parity = solver->iter() & 1;
  losses_[parity * num_replicas() + rank] = *loss;
  // With one replica, no other process and no hook there is nothing to do here.
  if (sync_ || gradient_hook_ || exchange_) {
    const std::vector<DeviceBuffer> gradients = GradientBuffers(solver->net(), devices_[rank]);
    // AllReduce starts with a barrier: root's stop_at_ and every replica's loss are visible to
    // every replica after it.
    if (sync_) sync_->AllReduce(rank, gradients, 1.0f / static_cast<float>(num_replicas()));
    if (rank == 0) {
      float local_loss = 0.0f;
      for (int r = 0; r < num_replicas(); ++r) local_loss += losses_[parity * num_replicas() + r];
      local_loss /= static_cast<float>(num_replicas());
      *loss = local_loss;
      if (exchange_) {
        exchange_->Finish(gradients);
        // The mean loss and whether any rank stops, after the gradients.
        float control[2] = {local_loss, stop_at_.load() == solver->iter() ? 1.0f : 0.0f};
        exchange_->AllReduceHost(control, 2);
        *loss = control[0] / static_cast<float>(num_processes());
        if (control[1] > 0.0f) stop_at_.store(solver->iter());
      }
      if (gradient_hook_) gradient_hook_(gradients);
    }
    // The Broadcast starts with a barrier too: root's last word on stop_at_ is seen after it.
    if (sync_ && (gradient_hook_ || exchange_)) sync_->Broadcast(rank, gradients);
  }
  stop_now_[rank] = stop_at_.load() == solver->iter();
}

SolverAction Trainer::ReplicaAction(int rank) {
  if (stop_now_[rank]) return SolverAction::kStop;
  if (rank != 0) return aborted_.load() ? SolverAction::kStop : SolverAction::kNone;
  PollUser();
  // With other replicas or ranks, a stop goes through the next gradient exchange, so that
  // every one stops after the same iteration.
  if (num_replicas() == 1 && !comm_ && pending_stop_) {
    pending_stop_ = false;
    return SolverAction::kStop;
  }
  if (pending_snapshot_) {
    pending_snapshot_ = false;
    return SolverAction::kSnapshot;
  }
  return SolverAction::kNone;
}

}  // namespace cortado
