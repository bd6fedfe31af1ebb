// SPDX-License-Identifier: Apache-2.0
// `cortado train`: Caffe's `caffe train`. Builds the solver from --solver, then either resumes
// from --snapshot or starts from fresh weights (optionally copied from --weights, comma-separated,
// for fine-tuning) and trains to max_iter (or --iterations). SIGINT and SIGHUP ask the solver to
// stop or snapshot (--sigint_effect, --sighup_effect); the handlers only set a flag that the
// training loop polls, and the previous handlers are put back when training ends.
// --gpu=0,1 (or all) trains one replica per listed GPU in this process (parallel/trainer.hpp),
// overriding solver_mode and device_id; without it, solver_mode and device_id choose.
// Under mpirun, or with --world/--rank/--peers, the process is one rank of a job of several
// (tools/comm_flags.hpp); rank 0 alone logs, tests and snapshots.
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <sstream>

#include "core/logging.hpp"
#include "parallel/trainer.hpp"
#include "solvers/snapshot.hpp"
#include "solvers/solver.hpp"
#include "tools/comm_flags.hpp"
#include "tools/commands.hpp"
#include "tools/feed_check.hpp"
#include "tools/flags.hpp"
#include "tools/gpu_flag.hpp"

namespace cortado::tools {
namespace {

// Set by the signal handler, read and cleared by the training loop. Lock-free atomics are
// async-signal-safe.
std::atomic<int> got_sigint{0};
std::atomic<int> got_sighup{0};
static_assert(std::atomic<int>::is_always_lock_free, "signal flags must be lock-free");

extern "C" void HandleTrainingSignal(int signal_number) {
  if (signal_number == SIGINT) got_sigint.store(1);
  if (signal_number == SIGHUP) got_sighup.store(1);
}

SolverAction ParseEffect(const std::string& flag, const std::string& value) {
  if (value == "stop") return SolverAction::kStop;
  if (value == "snapshot") return SolverAction::kSnapshot;
  if (value == "none") return SolverAction::kNone;
  CORTADO_THROW(kInvalidArgument, "--{} must be stop, snapshot or none, got '{}'", flag, value);
}

// Installs the SIGINT/SIGHUP handlers for its lifetime.
class SignalGuard {
 public:
  SignalGuard(SolverAction sigint_effect, SolverAction sighup_effect)
      : sigint_effect_(sigint_effect), sighup_effect_(sighup_effect) {
    got_sigint.store(0);
    got_sighup.store(0);
    struct sigaction action = {};
    action.sa_handler = HandleTrainingSignal;
    action.sa_flags = SA_RESTART;
    sigfillset(&action.sa_mask);
    if (sigaction(SIGINT, &action, &old_sigint_) != 0 ||
        sigaction(SIGHUP, &action, &old_sighup_) != 0) {
      CORTADO_THROW(kInternal, "cannot install the SIGINT/SIGHUP handlers");
    }
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_sigint_, nullptr);
    sigaction(SIGHUP, &old_sighup_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  // One pending request per call, SIGINT first (as Caffe's SignalHandler).
  SolverAction Check() const {
    if (got_sigint.exchange(0)) return sigint_effect_;
    if (got_sighup.exchange(0)) return sighup_effect_;
    return SolverAction::kNone;
  }

 private:
  SolverAction sigint_effect_;
  SolverAction sighup_effect_;
  struct sigaction old_sigint_ = {};
  struct sigaction old_sighup_ = {};
};

}  // namespace

caffe::NetParameter ReadWeightsFile(const std::string& path) {
  if (snapshot::CheckDigestIfPresent(path)) {
    CORTADO_LOG_INFO("{} matches the SHA-256 digest in {}", path, snapshot::DigestsFileFor(path));
  }
  return snapshot::ReadModel(path);
}

void CopyWeightsFromFile(const std::string& path, Net* net) {
  const caffe::NetParameter weights = ReadWeightsFile(path);
  WithContext(path, [&] { net->CopyTrainedLayersFrom(weights); });
}

int TrainCommand(int argc, char** argv) {
  std::vector<FlagSpec> specs = {
      {"solver", "", "the solver prototxt"},
      {"snapshot", "", "a .solverstate[.h5] to resume training from"},
      {"weights", "", "comma-separated .caffemodel[.h5] files to fine-tune from"},
      {"iterations", "", "train to this many iterations (overrides max_iter)"},
      {"sigint_effect", "stop", "what SIGINT does: stop, snapshot or none"},
      {"sighup_effect", "snapshot", "what SIGHUP does: snapshot, stop or none"},
      {"level", "", "train net level (overrides train_state)"},
      {"stage", "", "comma-separated train net stages (added to train_state)"},
      {"threads", "0", "CPU threads (0: all cores this process may use)"},
      {"gpu", "",
       "GPUs to train on, one replica each: 0, 0,1 or all (overrides solver_mode; a GPU listed "
       "twice runs two replicas)"},
      {"precision", "", "float32, tf32, float16 or bfloat16: overrides the solver's precision"},
  };
  for (const FlagSpec& spec : CommFlagSpecs()) specs.push_back(spec);
  Flags flags(argc, argv, 2, specs);
  if (flags.Get("solver").empty()) {
    CORTADO_THROW(kInvalidArgument, "cortado train needs --solver\n{}", Flags::Usage(specs));
  }
  if (!flags.Get("snapshot").empty() && !flags.Get("weights").empty()) {
    CORTADO_THROW(kInvalidArgument,
                  "give --snapshot to resume training or --weights to fine-tune, but not both");
  }
  const SolverAction sigint_effect = ParseEffect("sigint_effect", flags.Get("sigint_effect"));
  const SolverAction sighup_effect = ParseEffect("sighup_effect", flags.Get("sighup_effect"));
  if (flags.GetInt("threads") > 0) Context::SetNumThreads(flags.GetInt("threads"));

  caffe::SolverParameter param = ReadSolverFile(flags.Get("solver"));
  if (flags.IsSet("level")) param.mutable_train_state()->set_level(flags.GetInt("level"));
  for (const auto& stage : SplitList(flags.Get("stage"))) {
    param.mutable_train_state()->add_stage(stage);
  }
  if (flags.IsSet("iterations")) {
    const int iterations = flags.GetInt("iterations");
    if (iterations < 0) {
      CORTADO_THROW(kInvalidArgument, "--iterations must not be negative, got {}", iterations);
    }
    param.set_max_iter(iterations);
  }

  if (flags.IsSet("precision")) param.set_precision(ParsePrecisionFlag(flags.Get("precision")));

  std::vector<Device> devices;
  if (flags.IsSet("gpu")) {
    const std::vector<int> gpus = ParseGpuFlag(flags.Get("gpu"));
    param.set_solver_mode(caffe::SolverParameter::GPU);
    param.set_device_id(gpus[0]);
    std::string names;
    for (int gpu : gpus) {
      devices.push_back(Device::Cuda(gpu));
      names += (names.empty() ? "" : ", ") + std::to_string(gpu);
    }
    CORTADO_LOG_INFO("Using GPUs {}", names);
  } else {
    devices.push_back(SolverDevice(param));
    // Under mpirun, the ranks of one host take its GPUs in turn (local rank modulo their count).
    const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (devices[0].is_cuda() && local_rank != nullptr && Context::CudaDeviceCount() > 1) {
      devices[0] = Device::Cuda(std::atoi(local_rank) % Context::CudaDeviceCount());
      param.set_device_id(devices[0].id);
      CORTADO_LOG_INFO("Local rank {} trains on GPU {}", local_rank, devices[0].id);
    }
  }

  TrainerOptions options;
  options.net = NetOptionsFromEnvironment();
  options.exchange = ExchangeOptionsFromFlags(flags);
  options.comm = CommunicatorFromFlags(flags, devices[0].is_cuda() ? devices[0].id : 0);
  const int rank = options.comm ? options.comm->rank() : 0;
  // Rank 0 speaks for the job; the others log warnings and errors only.
  if (rank > 0) SetThreadQuiet(true);
  CORTADO_LOG_INFO("Starting Optimization");
  Trainer trainer(param, devices, options);
  if (devices[0].is_cpu()) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    const char* why = flags.GetInt("threads") > 0            ? "--threads"
                      : env != nullptr && std::atoi(env) > 0 ? "OMP_NUM_THREADS"
                                                             : "every core this process may use";
    CORTADO_LOG_INFO("CPU: {} threads ({}); OpenMP's idle threads: {}",
                     trainer.cpu_threads_per_replica(), why, Context::OpenMpWait());
  }
  Solver* solver = trainer.root();
  RefuseFeedLayers(*solver->net(), "cortado train");
  for (const auto& test_net : solver->test_nets()) RefuseFeedLayers(*test_net, "cortado train");
  SignalGuard signals(sigint_effect, sighup_effect);
  trainer.set_action_callback([&signals] { return signals.Check(); });
  if (!flags.Get("snapshot").empty()) {
    CORTADO_LOG_INFO("Resuming from {}", flags.Get("snapshot"));
    trainer.Solve(flags.Get("snapshot"));
  } else {
    // Into root of rank 0 only: the trainer hands its weights to the other replicas and ranks.
    for (const auto& path :
         rank == 0 ? SplitList(flags.Get("weights")) : std::vector<std::string>{}) {
      CORTADO_LOG_INFO("Finetuning from {}", path);
      // Read (and checked) once for the train net and every test net.
      const caffe::NetParameter weights = ReadWeightsFile(path);
      WithContext(path, [&] { solver->net()->CopyTrainedLayersFrom(weights); });
      for (const auto& test_net : solver->test_nets()) {
        WithContext(path, [&] { test_net->CopyTrainedLayersFrom(weights); });
      }
    }
    trainer.Solve();
  }
  CORTADO_LOG_INFO("Optimization Done.");
  return 0;
}

}  // namespace cortado::tools
