// SPDX-License-Identifier: Apache-2.0
#include "comm/mpi/mpi_communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/registry.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"

namespace cortado::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

void Check(int code, const std::string& what) {
  if (code != MPI_SUCCESS) CORTADO_THROW(kComm, "mpi: {} failed: {}", what, MpiErrorText(code));
}

// MPI once per process; finalised at exit unless someone else initialised it, or a
// communicator broke (a collective of a lost peer may never finish; finalising would wait).
std::atomic<bool> g_broken{false};
bool g_we_initialised = false;

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_broken.load()) MPI_Finalize();
}

void EnsureInitialised() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    Check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_SERIALIZED) {
      CORTADO_LOG_WARN("MPI offers thread level {} only; the mpi backend needs serialised calls",
                       provided);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    g_we_initialised = true;
    std::atexit(FinalizeAtExit);
  });
}

bool UnderLauncher() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return size != nullptr && std::atoi(size) > 1;
}

void CheckServer() {
  if (std::getenv("OMPI_MCA_pmix_server_uri") == nullptr) {
    CORTADO_THROW(kInvalidArgument,
                  "the mpi backend outside mpirun needs an ompi-server: start `ompi-server "
                  "--report-uri FILE` and set OMPI_MCA_pmix_server_uri=file:FILE in every rank's "
                  "environment (or start the job with mpirun, or use the tcp backend)");
  }
}

// Runs `call` (a blocking MPI call that yields a communicator, such as MPI_Comm_accept) on a
// thread of its own and waits for it up to `timeout_s`. Returns true with `*code` and `*result`
// when it ended in time; false when it did not. MPI cannot cancel an accept or a connect, so the
// thread is then left behind, detached and blocked in the call: it owns what it touches (the
// shared state below), ends if the peer ever comes, and does not keep
// the process from exiting. MPI is not finalised at exit afterwards (g_broken), since finalising
// would wait for the call.
bool CallWithin(double timeout_s, std::function<int(MPI_Comm*)> call, int* code, MPI_Comm* result) {
  struct State {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    bool abandoned = false;
    int code = MPI_SUCCESS;
    MPI_Comm result = MPI_COMM_NULL;
  };
  auto state = std::make_shared<State>();
  std::thread([state, call = std::move(call)] {
    MPI_Comm got = MPI_COMM_NULL;
    const int rc = call(&got);
    std::lock_guard<std::mutex> lock(state->mutex);
    // Too late: whoever waited has failed, and what the call got is left alone (the peer's
    // next step fails on its own timeout).
    if (state->abandoned) return;
    state->code = rc;
    state->result = got;
    state->done = true;
    state->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(state->mutex);
  const bool in_time = state->done_cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                               [&] { return state->done; });
  if (!in_time) {
    state->abandoned = true;
    g_broken.store(true);
    return false;
  }
  *code = state->code;
  *result = state->result;
  return true;
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const CommOptions& options)
      : Communicator(options.rank, options.world_size), options_(options) {
    if (!UnderLauncher()) CheckServer();  // before MPI starts: a singleton without it fails
    EnsureInitialised();
    if (UnderLauncher()) {
      int size = 0;
      int rank = 0;
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (size != options.world_size || rank != options.rank) {
        CORTADO_THROW(kInvalidArgument,
                      "mpirun made this process rank {} of {}, but rank {} of {} was asked for",
                      rank, size, options.rank, options.world_size);
      }
      Check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
      how_ = "under mpirun";
    } else {
      Join();
      how_ = "joined through ompi-server";
    }
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    CORTADO_LOG_INFO("mpi communicator: rank {} of {} ({})", rank(), size(), how_);
  }

  ~MpiCommunicator() override {
    // A broken communicator may have a collective in flight that never ends: leave it.
    if (comm_ != MPI_COMM_NULL && !broken_) MPI_Comm_free(&comm_);
  }

  const char* backend() const override { return "mpi"; }

  void AllReduce(float* data, size_t count) override {
    Begin();
    for (size_t done = 0; done < count;) {
      const int n = static_cast<int>(std::min<size_t>(count - done, INT_MAX));
      MPI_Request request;
      Issue(MPI_Iallreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM, comm_, &request),
            "allreduce");
      Wait(&request, "allreduce", count);
      done += static_cast<size_t>(n);
    }
  }

  void Broadcast(void* data, size_t bytes, int root) override {
    Begin();
    if (root < 0 || root >= size()) {
      CORTADO_THROW(kInvalidArgument, "mpi broadcast from rank {}: the world has {} ranks", root,
                    size());
    }
    char* at = static_cast<char*>(data);
    for (size_t done = 0; done < bytes;) {
      const int n = static_cast<int>(std::min<size_t>(bytes - done, INT_MAX));
      MPI_Request request;
      Issue(MPI_Ibcast(at + done, n, MPI_BYTE, root, comm_, &request), "broadcast");
      Wait(&request, "broadcast", bytes);
      done += static_cast<size_t>(n);
    }
  }

  std::vector<std::string> AllGather(const std::string& mine) override {
    Begin();
    if (mine.size() > INT_MAX) CORTADO_THROW(kInvalidArgument, "mpi allgather of over 2 GiB");
    const int length = static_cast<int>(mine.size());
    std::vector<int> lengths(size());
    MPI_Request request;
    Issue(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, &request),
          "allgather");
    Wait(&request, "allgather", 1);
    std::vector<int> offsets(size());
    int64_t total = 0;
    for (int r = 0; r < size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += lengths[r];
    }
    if (total > INT_MAX) CORTADO_THROW(kInvalidArgument, "mpi allgather of over 2 GiB in all");
    std::string all(static_cast<size_t>(total), '\0');
    Issue(MPI_Iallgatherv(mine.data(), length, MPI_BYTE, all.data(), lengths.data(), offsets.data(),
                          MPI_BYTE, comm_, &request),
          "allgather");
    Wait(&request, "allgather", static_cast<size_t>(total));
    std::vector<std::string> result(size());
    for (int r = 0; r < size(); ++r) result[r] = all.substr(offsets[r], lengths[r]);
    return result;
  }

  void Barrier() override {
    Begin();
    MPI_Request request;
    Issue(MPI_Ibarrier(comm_, &request), "barrier");
    Wait(&request, "barrier", 0);
  }

  void Abort(const std::string& reason) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_.load()) abort_reason_ = reason.empty() ? "aborted" : reason;
    aborted_.store(true);
  }

 private:
  // Grows the group from rank 0's port; see the header.
  void Join() {
    CheckServer();
    const std::string service =
        "cortado-" + options_.token + "-" + std::to_string(options_.attempt);
    std::string port = options_.mpi_port;
    bool published = false;
    if (rank() == 0 && port.empty()) {
      port = OpenMpiPort();
      Check(MPI_Publish_name(service.c_str(), MPI_INFO_NULL, port.c_str()),
            "MPI_Publish_name at the ompi-server (OMPI_MCA_pmix_server_uri)");
      published = true;
    }
    if (rank() != 0 && port.empty()) port = LookUp(service);
    MPI_Comm group = MPI_COMM_SELF;
    MPI_Comm inter = MPI_COMM_NULL;
    int members = 1;
    // One joiner at a time, in rank order: rank 0 names whose turn it is at the ompi-server
    // before each accept. (Open MPI 4.1 singletons that connect to one port at the same time
    // can hang in the accept.)
    auto turn = [&](int r) { return service + "-turn-" + std::to_string(r); };
    const double timeout_s = options_.connect_timeout_s;
    if (rank() != 0) {
      LookUpTurn(turn, rank());
      // Connect and merge on a helper thread: neither has a timeout of its own, and rank 0 may
      // have given up (or gone) since it published our turn.
      int code = MPI_SUCCESS;
      const std::string where = port;
      if (!CallWithin(
              timeout_s,
              [where](MPI_Comm* merged) {
                MPI_Comm joined = MPI_COMM_NULL;
                const int rc =
                    MPI_Comm_connect(where.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &joined);
                if (rc != MPI_SUCCESS) return rc;
                const int merge_rc = MPI_Intercomm_merge(joined, /*high=*/1, merged);
                MPI_Comm_free(&joined);
                return merge_rc;
              },
              &code, &group)) {
        broken_ = true;
        CORTADO_THROW(kTimeout,
                      "rank {}: the ranks already joined did not take rank {} into the mpi "
                      "communicator within {} s (connecting to rank 0's port {})",
                      rank(), rank(), timeout_s, port);
      }
      Check(code, "connecting to rank 0's port " + port);
      MPI_Comm_size(group, &members);
    }
    while (members < size()) {
      MPI_Comm merged = MPI_COMM_NULL;
      if (rank() == 0) {
        Check(MPI_Publish_name(turn(members).c_str(), MPI_INFO_NULL, port.c_str()),
              "MPI_Publish_name at the ompi-server (OMPI_MCA_pmix_server_uri)");
      }
      // MPI_Comm_accept has no timeout and cannot be cancelled: wait for it on a helper thread,
      // which stays blocked in it if the joiner never comes (see CallWithin).
      int code = MPI_SUCCESS;
      const std::string where = port;
      const MPI_Comm members_group = group;
      if (!CallWithin(
              timeout_s,
              [where, members_group](MPI_Comm* accepted) {
                return MPI_Comm_accept(where.c_str(), MPI_INFO_NULL, 0, members_group, accepted);
              },
              &code, &inter)) {
        broken_ = true;
        CORTADO_THROW(kTimeout,
                      "rank {}: rank {} did not join the mpi communicator within {} s (the ranks "
                      "join in rank order; a thread of this process stays blocked in "
                      "MPI_Comm_accept, which MPI cannot cancel)",
                      rank(), members, timeout_s);
      }
      Check(code, "MPI_Comm_accept");
      if (rank() == 0) MPI_Unpublish_name(turn(members).c_str(), MPI_INFO_NULL, port.c_str());
      Check(MPI_Intercomm_merge(inter, /*high=*/0, &merged), "MPI_Intercomm_merge");
      MPI_Comm_free(&inter);
      if (group != MPI_COMM_SELF) MPI_Comm_free(&group);
      group = merged;
      MPI_Comm_size(group, &members);
    }
    if (published) MPI_Unpublish_name(service.c_str(), MPI_INFO_NULL, port.c_str());
    if (rank() == 0) MPI_Close_port(port.c_str());
    // Everyone's requested rank: distinct, then the order.
    std::vector<int> wanted(size());
    const int mine = rank();
    Check(MPI_Allgather(&mine, 1, MPI_INT, wanted.data(), 1, MPI_INT, group), "MPI_Allgather");
    for (int i = 0; i < size(); ++i) {
      for (int j = 0; j < i; ++j) {
        if (wanted[i] == wanted[j]) {
          CORTADO_THROW(kInvalidArgument,
                        "two processes joined the mpi communicator as rank {} (of {})", wanted[i],
                        size());
        }
      }
    }
    Check(MPI_Comm_split(group, 0, rank(), &comm_), "MPI_Comm_split");
    if (group != MPI_COMM_SELF) MPI_Comm_free(&group);
  }

  // Waits until rank 0 publishes that it is rank `me`'s turn to join. When it does not within
  // connect_timeout_s, the error names the rank whose turn it was while we waited (a rank that
  // did not join), when the server said.
  template <typename Turn>
  void LookUpTurn(const Turn& turn, int me) {
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(options_.connect_timeout_s));
    char port[MPI_MAX_PORT_NAME] = {};
    int awaited = -1;  // the last turn seen published before ours
    for (int i = 0;; ++i) {
      if (MPI_Lookup_name(turn(me).c_str(), MPI_INFO_NULL, port) == MPI_SUCCESS) return;
      if (Clock::now() > deadline) break;
      if (i % 10 == 0) {  // about once a second: whose turn is it?
        for (int k = me - 1; k >= 1; --k) {
          if (MPI_Lookup_name(turn(k).c_str(), MPI_INFO_NULL, port) == MPI_SUCCESS) {
            awaited = k;
            break;
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (awaited > 0) {
      CORTADO_THROW(kTimeout,
                    "rank {}: rank {} did not join the mpi communicator within {} s (the ranks "
                    "join in rank order; rank 0 was awaiting rank {})",
                    me, awaited, options_.connect_timeout_s, awaited);
    }
    CORTADO_THROW(kTimeout,
                  "rank {}: rank 0 did not publish '{}' at the ompi-server within {} s (a rank "
                  "before {} did not join?)",
                  me, turn(me), options_.connect_timeout_s, me);
  }

  std::string LookUp(const std::string& service) {
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(options_.connect_timeout_s));
    char port[MPI_MAX_PORT_NAME] = {};
    int code = MPI_SUCCESS;
    for (;;) {
      code = MPI_Lookup_name(service.c_str(), MPI_INFO_NULL, port);
      if (code == MPI_SUCCESS) return port;
      if (Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    CORTADO_THROW(kTimeout,
                  "rank {}: rank 0 did not publish '{}' at the ompi-server within {} s (last "
                  "error: {})",
                  rank(), service, options_.connect_timeout_s, MpiErrorText(code));
  }

  void Begin() {
    if (aborted_.load()) {
      broken_ = true;
      g_broken.store(true);
      std::lock_guard<std::mutex> lock(mutex_);
      CORTADO_THROW(kAborted, "mpi communicator (rank {}): {}", rank(), abort_reason_);
    }
    if (first_error_) std::rethrow_exception(first_error_);
  }

  void Issue(int code, const char* what) {
    if (code == MPI_SUCCESS) return;
    Fail(ErrorCode::kComm,
         fmt::format("mpi {} on rank {} failed: {}", what, rank(), MpiErrorText(code)));
  }

  [[noreturn]] void Fail(ErrorCode code, const std::string& message) {
    broken_ = true;
    g_broken.store(true);
    try {
      throw Error(code, message, __FILE__, __LINE__);
    } catch (...) {
      first_error_ = std::current_exception();
    }
    std::rethrow_exception(first_error_);
  }

  // Polls the request until done, the timeout or Abort.
  void Wait(MPI_Request* request, const char* what, size_t amount) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(options_.timeout_s));
    const auto started = Clock::now();
    for (;;) {
      int done = 0;
      const int code = MPI_Test(request, &done, MPI_STATUS_IGNORE);
      if (code != MPI_SUCCESS) Issue(code, what);
      if (done) return;
      if (aborted_.load()) {
        std::string reason;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          reason = abort_reason_;
        }
        Fail(ErrorCode::kAborted,
             fmt::format("mpi {} on rank {} aborted: {}", what, rank(), reason));
      }
      if (Clock::now() > deadline) {
        Fail(ErrorCode::kTimeout,
             fmt::format("mpi {} ({} elements) on rank {} did not complete within {} s "
                         "(a peer may be gone)",
                         what, amount, rank(), options_.timeout_s));
      }
      // MPI moves a non-blocking collective's data only inside MPI calls: test without pause
      // for the first 50 ms (a collective's usual length), then every 200 us.
      if (Clock::now() - started < std::chrono::milliseconds(50)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

  CommOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  const char* how_ = "";
  bool broken_ = false;
  std::exception_ptr first_error_;
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::string abort_reason_;
};

std::unique_ptr<Communicator> MakeMpi(const CommOptions& options) {
  return std::make_unique<MpiCommunicator>(options);
}

}  // namespace

std::string OpenMpiPort() {
  EnsureInitialised();
  CheckServer();
  char port[MPI_MAX_PORT_NAME] = {};
  Check(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port");
  return port;
}

CORTADO_REGISTER_COMMUNICATOR(mpi, MakeMpi);
CORTADO_REGISTER_ROOT_RENDEZVOUS(mpi, OpenMpiPort);

}  // namespace cortado::comm
