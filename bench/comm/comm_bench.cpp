// SPDX-License-Identifier: Apache-2.0
// AllReduce bandwidth of a communicator backend, reported as nccl-tests does: for float buffers
// of sizes doubling from --min-bytes to --max-bytes, the time of one AllReduce (the slowest
// rank's mean over --iters), algbw = size / time and busbw = algbw * 2 (N - 1) / N (what each
// rank's link carries in a ring; comparable across rank counts).
//
//   cortado_comm_bench --backend=tcp --rank=R --world=N --peers=h0:p0,h1:p1,... [options]
//   cortado_comm_bench --backend=ucx --rank=R ...   the same for the ucx backend (WITH_UCX builds;
//                                                   UCX_TLS picks its transports)
//   cortado_comm_bench --threads=N [--backend=tcp|ucx] [options]   N ranks as threads on 127.0.0.1
//   mpirun -n N cortado_comm_bench --backend=mpi     rank and world from OMPI_COMM_WORLD_*
//   mpirun -n N cortado_comm_bench --mpi-native      MPI_Allreduce itself, for comparison
// options: --min-bytes=4K --max-bytes=256M --iters=auto|N --warmup=N --chunk-bytes=1M
//          --wire=bfloat16 (AllReduceAs: the values travel as bfloat16 or float16; sizes and
//          bandwidths count the float32 buffer)
//          --timeout=120 --token=...
// Rank 0 prints the table on stdout, after a comment line with its communicator's Describe() (for
// ucx: the transport of each connection). Each size is first checked once (every rank
// contributes rank + 1; the sum must be N (N + 1) / 2 everywhere).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/tcp_communicator.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"

#if CORTADO_WITH_MPI
#include <mpi.h>
#endif
#if CORTADO_WITH_UCX
#include "comm/ucx/ucx_communicator.hpp"
#endif

namespace cortado {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::map<std::string, std::string> values;
  bool Has(const std::string& key) const { return values.count(key) != 0; }
  std::string Get(const std::string& key, const std::string& fallback) const {
    const auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
};

Flags ParseFlags(int argc, char** argv) {
  static const char* const kKnown[] = {
      "backend",    "rank",   "world",       "peers",     "min-bytes",   "max-bytes",
      "iters",      "warmup", "chunk-bytes", "timeout",   "token",       "threads",
      "mpi-native", "help",   "wire",        "algorithm", "hierarchical"};
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) CORTADO_THROW(kInvalidArgument, "unexpected argument '{}'", arg);
    arg = arg.substr(2);
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      CORTADO_THROW(kInvalidArgument, "unknown flag --{}", key);
    }
    flags.values[key] = eq == std::string::npos ? "true" : arg.substr(eq + 1);
  }
  return flags;
}

// "4096", "4K", "256M", "1G" (powers of 1024).
size_t ParseBytes(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    CORTADO_THROW(kInvalidArgument, "--{}={} is not a size", flag, text);
  }
  const std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "K" || unit == "k") {
    scale = 1 << 10;
  } else if (unit == "M" || unit == "m") {
    scale = 1 << 20;
  } else if (unit == "G" || unit == "g") {
    scale = 1 << 30;
  } else if (!unit.empty()) {
    CORTADO_THROW(kInvalidArgument, "--{}={}: unknown unit '{}' (K, M or G)", flag, text, unit);
  }
  return static_cast<size_t>(value * scale);
}

int ParseInt(const std::string& what, const std::string& text) {
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  CORTADO_THROW(kInvalidArgument, "{}={} is not an integer", what, text);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

struct Settings {
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 256 << 20;
  int iters = 0;  // 0: by size
  int warmup = -1;
  size_t chunk_bytes = 0;  // 0: the backend's default
  comm::WireType wire = comm::WireType::kFloat32;
};

// About 1 GiB of data per size, between 5 and 500 calls; every rank derives the same count.
int ItersFor(const Settings& s, size_t bytes) {
  if (s.iters > 0) return s.iters;
  return static_cast<int>(
      std::clamp<size_t>((size_t{1} << 30) / std::max<size_t>(bytes, 1), 5, 500));
}

int WarmupFor(const Settings& s, int iters) {
  return s.warmup >= 0 ? s.warmup : std::clamp(iters / 10, 1, 5);
}

// What the table needs of a backend: an AllReduce, and the slowest rank's time.
class Target {
 public:
  virtual ~Target() = default;
  virtual void AllReduce(float* data, size_t count) = 0;
  virtual double Max(double seconds) = 0;
  virtual void Barrier() = 0;
};

class CommunicatorTarget final : public Target {
 public:
  CommunicatorTarget(comm::Communicator* comm, comm::WireType wire) : comm_(comm), wire_(wire) {}
  void AllReduce(float* data, size_t count) override { comm_->AllReduceAs(data, count, wire_); }
  double Max(double seconds) override {
    double slowest = 0;
    for (const std::string& s : comm_->AllGather(fmt::format("{:.9g}", seconds))) {
      slowest = std::max(slowest, std::stod(s));
    }
    return slowest;
  }
  void Barrier() override { comm_->Barrier(); }

 private:
  comm::Communicator* comm_;
  comm::WireType wire_;
};

#if CORTADO_WITH_MPI
class MpiNativeTarget final : public Target {
 public:
  void AllReduce(float* data, size_t count) override {
    // MPI counts are ints: large buffers go in pieces.
    const size_t piece = size_t{1} << 30;
    for (size_t done = 0; done < count; done += piece) {
      const int n = static_cast<int>(std::min(piece, count - done));
      MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
  }
  double Max(double seconds) override {
    double slowest = 0;
    MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
  }
  void Barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
};
#endif

// Runs the sizes on one rank; rank 0 prints the table (header by the caller).
void RunSizes(Target* target, int rank, int world, const Settings& s) {
  const double bus_factor = world > 1 ? 2.0 * (world - 1) / world : 0.0;
  std::vector<float> buffer(s.max_bytes / sizeof(float));
  for (size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    float* data = buffer.data();
    // Check once: sum of rank + 1 over the ranks.
    std::fill(data, data + count, static_cast<float>(rank + 1));
    target->AllReduce(data, count);
    const float want = static_cast<float>(world * (world + 1) / 2);
    for (size_t i = 0; i < count; ++i) {
      if (data[i] != want) {
        CORTADO_THROW(kInternal, "rank {}: allreduce of {} floats gave {} at {}, expected {}", rank,
                      count, data[i], i, want);
      }
    }
    // Zeros for timing: sums stay finite however many calls.
    std::fill(data, data + count, 0.0f);
    const int iters = ItersFor(s, bytes);
    for (int i = 0; i < WarmupFor(s, iters); ++i) target->AllReduce(data, count);
    target->Barrier();
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) target->AllReduce(data, count);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
    const double slowest = target->Max(seconds);
    if (rank == 0) {
      const double algbw = static_cast<double>(bytes) / slowest / 1e9;
      std::printf("%14zu %12zu %12.1f %10.3f %10.3f %6d\n", bytes, count, slowest * 1e6, algbw,
                  algbw * bus_factor, iters);
      std::fflush(stdout);
    }
    if (bytes > s.max_bytes / 2) break;  // no overflow past the largest size
  }
}

void PrintHeader(const std::string& what, int world, const Settings& s) {
  std::printf("# cortado_comm_bench: %s, %d ranks, %zu to %zu bytes%s%s\n", what.c_str(), world,
              s.min_bytes, s.max_bytes,
              s.chunk_bytes > 0 ? (", chunk " + std::to_string(s.chunk_bytes)).c_str() : "",
              s.wire != comm::WireType::kFloat32
                  ? (std::string(", on the wire as ") + comm::WireTypeName(s.wire)).c_str()
                  : "");
  std::printf("# %12s %12s %12s %10s %10s %6s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
              "busbw(GB/s)", "iters");
  std::fflush(stdout);
}

comm::CommOptions BaseOptions(const Flags& flags, const Settings& s) {
  comm::CommOptions options;
  options.backend = flags.Get("backend", "tcp");
  options.token = flags.Get("token", "cortado-comm-bench");
  const double timeout = std::stod(flags.Get("timeout", "120"));
  options.timeout_s = timeout;
  options.connect_timeout_s = timeout;
  if (s.chunk_bytes > 0) options.chunk_bytes = s.chunk_bytes;
  options.allreduce_algorithm = flags.Get("algorithm", "auto");
  options.hierarchical = flags.Get("hierarchical", "true") != "false";
  return options;
}

// The ucx backend is compiled only with WITH_UCX: say so rather than "unknown backend".
void CheckBackendBuilt(const std::string& backend) {
#if !CORTADO_WITH_UCX
  if (backend == "ucx") {
    CORTADO_THROW(kUnimplemented,
                  "--backend=ucx: this build has no ucx backend (configure with -DWITH_UCX=ON; "
                  "needs UCX, e.g. Debian's libucx-dev)");
  }
#else
  (void)backend;
#endif
}

// Rank options.rank of the tcp or ucx backend, its (set-up) ring accepting on `listener`.
std::unique_ptr<comm::Communicator> CreateWithListener(
    const comm::CommOptions& options, std::unique_ptr<comm::TcpListener> listener) {
#if CORTADO_WITH_UCX
  if (options.backend == "ucx") return comm::CreateUcxCommunicator(options, std::move(listener));
#endif
  return comm::CreateTcpCommunicator(options, std::move(listener));
}

void PrintDescription(const comm::Communicator& comm) {
  std::printf("# %s\n", comm.Describe().c_str());
  std::fflush(stdout);
}

// N tcp or ucx ranks as threads of this process, on 127.0.0.1 (ucx: its set-up ring too).
int RunThreads(const Flags& flags, const Settings& s, int world) {
  comm::CommOptions base = BaseOptions(flags, s);
  CheckBackendBuilt(base.backend);
  if (base.backend != "tcp" && base.backend != "ucx") {
    CORTADO_THROW(kInvalidArgument, "--threads runs the tcp and ucx backends only, not '{}'",
                  base.backend);
  }
  std::vector<std::unique_ptr<comm::TcpListener>> listeners;
  for (int r = 0; r < world; ++r) {
    listeners.push_back(comm::TcpListener::Open("127.0.0.1", 0));
    base.peers.push_back("127.0.0.1:" + std::to_string(listeners.back()->port()));
  }
  base.world_size = world;
  PrintHeader(base.backend + " backend, threads", world, s);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::unique_ptr<comm::Communicator>> comms(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        comm::CommOptions options = base;
        options.rank = r;
        comms[r] = CreateWithListener(options, std::move(listeners[r]));
        if (r == 0) PrintDescription(*comms[r]);
        CommunicatorTarget target(comms[r].get(), s.wire);
        RunSizes(&target, r, world, s);
      } catch (...) {
        errors[r] = std::current_exception();
        // Release the other ranks at once rather than at their timeout.
        for (auto& c : comms) {
          if (c) c->Abort("rank " + std::to_string(r) + " failed");
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  // Close all ranks at once: a ucx rank's clean close flushes to its peers, which must be
  // progressing their own close meanwhile (one after the other, each would wait for the next).
  threads.clear();
  for (auto& c : comms) threads.emplace_back([&c] { c.reset(); });
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return 0;
}

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? ParseInt(name, value) : fallback;
}

int RunProcess(const Flags& flags, const Settings& s) {
  const bool mpi = flags.Get("backend", "tcp") == "mpi" || flags.Has("mpi-native");
  // Under mpirun the rank and world come from the environment unless given.
  const int world = flags.Has("world") ? ParseInt("--world", flags.Get("world", ""))
                                       : (mpi ? EnvInt("OMPI_COMM_WORLD_SIZE", 1) : 1);
  const int rank = flags.Has("rank") ? ParseInt("--rank", flags.Get("rank", ""))
                                     : (mpi ? EnvInt("OMPI_COMM_WORLD_RANK", 0) : 0);
  if (flags.Has("mpi-native")) {
#if CORTADO_WITH_MPI
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    }
    int mpi_rank = 0;
    int mpi_world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_world);
    if (mpi_rank == 0) PrintHeader("MPI_Allreduce (native)", mpi_world, s);
    MpiNativeTarget target;
    RunSizes(&target, mpi_rank, mpi_world, s);
    if (!initialized) MPI_Finalize();
    return 0;
#else
    CORTADO_THROW(kUnimplemented, "--mpi-native: this build has no MPI (WITH_MPI=OFF)");
#endif
  }
  comm::CommOptions options = BaseOptions(flags, s);
  CheckBackendBuilt(options.backend);
  options.rank = rank;
  options.world_size = world;
  options.peers = SplitList(flags.Get("peers", ""));
  std::unique_ptr<comm::Communicator> comm = comm::CreateCommunicator(options);
  if (rank == 0) {
    PrintHeader(options.backend + " backend", world, s);
    PrintDescription(*comm);
  }
  CommunicatorTarget target(comm.get(), s.wire);
  RunSizes(&target, rank, world, s);
  return 0;
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  if (flags.Has("help")) {
    std::printf(
        "usage: %s --backend=tcp|ucx --rank=R --world=N --peers=h0:p0,... |\n"
        "  --threads=N [--backend=tcp|ucx] | --backend=mpi | --mpi-native\n"
        "  [--min-bytes=4K] [--max-bytes=256M] [--iters=auto|N] [--warmup=N]\n"
        "  [--chunk-bytes=1M] [--timeout=120] [--token=T] [--wire=float32|bfloat16|float16]\n"
        "  [--algorithm=auto|ring|doubling|halving] (tcp: how AllReduce moves each size)\n"
        "  [--hierarchical=true|false] (tcp: within each host first, where ranks share hosts)\n"
        "%s\n",
        argv[0],
        CORTADO_WITH_UCX ? "ucx: UCX_TLS picks its transports (e.g. tcp; sm,self)"
                         : "ucx: not in this build (configure with -DWITH_UCX=ON)");
    return 0;
  }
  SetLogLevel(std::getenv("CORTADO_LOG_LEVEL") != nullptr ? std::getenv("CORTADO_LOG_LEVEL")
                                                          : "warn");
  Settings s;
  s.min_bytes = ParseBytes("min-bytes", flags.Get("min-bytes", "4K"));
  s.max_bytes = ParseBytes("max-bytes", flags.Get("max-bytes", "256M"));
  if (s.min_bytes < sizeof(float) || s.max_bytes < s.min_bytes) {
    CORTADO_THROW(kInvalidArgument, "need 4 <= --min-bytes ({}) <= --max-bytes ({})", s.min_bytes,
                  s.max_bytes);
  }
  const std::string iters = flags.Get("iters", "auto");
  s.iters = iters == "auto" ? 0 : ParseInt("--iters", iters);
  if (flags.Has("warmup")) s.warmup = ParseInt("--warmup", flags.Get("warmup", ""));
  if (flags.Has("chunk-bytes")) {
    s.chunk_bytes = ParseBytes("chunk-bytes", flags.Get("chunk-bytes", ""));
  }
  if (flags.Has("wire")) {
    const std::string wire = flags.Get("wire", "");
    if (wire == "bfloat16") {
      s.wire = comm::WireType::kBFloat16;
    } else if (wire == "float16") {
      s.wire = comm::WireType::kFloat16;
    } else if (wire != "float32") {
      CORTADO_THROW(kInvalidArgument, "--wire must be float32, bfloat16 or float16, got '{}'",
                    wire);
    }
  }
  if (flags.Has("threads")) {
    return RunThreads(flags, s, ParseInt("--threads", flags.Get("threads", "")));
  }
  return RunProcess(flags, s);
}

}  // namespace
}  // namespace cortado

int main(int argc, char** argv) {
  try {
    return cortado::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cortado_comm_bench: %s\n", e.what());
    return 1;
  }
}
