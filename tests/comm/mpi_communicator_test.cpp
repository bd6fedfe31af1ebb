// SPDX-License-Identifier: Apache-2.0
// The mpi backend. MpiCommTest runs under a real `mpirun -np 3` (the ctest entry
// mpi_comm_np3) and skips elsewhere; MpiJoinTest starts an ompi-server and three processes that
// mpirun did not start, which join through it (as Spark executors would).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "support/spawn_ranks.hpp"

#if CORTADO_WITH_MPI
namespace cortado {
namespace {

bool UnderMpirun() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return size != nullptr && std::atoi(size) > 1;
}

comm::CommOptions LauncherOptions() {
  comm::CommOptions options;
  options.backend = "mpi";
  options.world_size = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
  options.rank = std::atoi(std::getenv("OMPI_COMM_WORLD_RANK"));
  options.timeout_s = 30;
  return options;
}

// Rank r's value at i: varied, exact in float, so the sum can be compared exactly.
float Value(int rank, size_t i) { return static_cast<float>((rank * 7 + i * 13) % 101) - 50.0f; }

// Checks AllReduce of several sizes, Broadcast from every root, AllGather and Barrier; throws
// on a mismatch (runs in rank processes, where gtest assertions do not reach the parent).
void Exercise(comm::Communicator* c) {
  const int n = c->size();
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{300000}}) {
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = Value(c->rank(), i);
    c->AllReduce(data.data(), count);
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < n; ++r) expected += Value(r, i);
      if (data[i] != expected) {
        CORTADO_THROW(kInternal, "allreduce of {}: element {} is {}, not {}", count, i, data[i],
                      expected);
      }
    }
    const std::vector<std::string> all = c->AllGather(
        std::string(reinterpret_cast<const char*>(data.data()), count * sizeof(float)));
    for (int r = 1; r < n; ++r) {
      if (all[r] != all[0]) CORTADO_THROW(kInternal, "rank {} differs after allreduce", r);
    }
  }
  for (int root = 0; root < n; ++root) {
    std::string bytes(1000, static_cast<char>('a' + c->rank()));
    c->Broadcast(bytes.data(), bytes.size(), root);
    if (bytes != std::string(1000, static_cast<char>('a' + root))) {
      CORTADO_THROW(kInternal, "broadcast from {} left other bytes", root);
    }
  }
  const std::vector<std::string> gathered =
      c->AllGather(c->rank() == 1 ? "" : std::string(c->rank() + 2, 'x'));
  for (int r = 0; r < n; ++r) {
    if (gathered[r] != (r == 1 ? "" : std::string(r + 2, 'x'))) {
      CORTADO_THROW(kInternal, "allgather: rank {}'s block is '{}'", r, gathered[r]);
    }
  }
  c->Barrier();
}

TEST(MpiCommTest, EveryOperationUnderMpirun) {
  if (!UnderMpirun()) GTEST_SKIP() << "runs under mpirun (ctest: mpi_comm_np3)";
  std::unique_ptr<comm::Communicator> c = comm::CreateCommunicator(LauncherOptions());
  EXPECT_STREQ(c->backend(), "mpi");
  EXPECT_NO_THROW(Exercise(c.get()));
}

TEST(MpiCommTest, ARankThatMpirunDidNotGiveIsRefused) {
  if (!UnderMpirun()) GTEST_SKIP() << "runs under mpirun (ctest: mpi_comm_np3)";
  comm::CommOptions options = LauncherOptions();
  options.world_size += 1;
  try {
    comm::CreateCommunicator(options);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun made this process rank"), std::string::npos)
        << e.what();
  }
}

// ---- outside mpirun: ompi-server -------------------------------------------------------------

TEST(MpiJoinTest, WithoutAnOmpiServerTheErrorSaysWhatToDo) {
  if (UnderMpirun()) GTEST_SKIP() << "runs outside mpirun";
  const std::vector<testing::RankOutcome> outcomes = testing::RunRanksAsProcesses(
      1,
      [](int) -> std::string {
        unsetenv("OMPI_MCA_pmix_server_uri");
        comm::CommOptions options;
        options.backend = "mpi";
        options.world_size = 2;
        options.rank = 1;
        comm::CreateCommunicator(options);
        return "joined";
      },
      30);
  ASSERT_FALSE(outcomes[0].ok) << testing::Describe(outcomes);
  EXPECT_NE(outcomes[0].error.find("needs an ompi-server"), std::string::npos) << outcomes[0].error;
  EXPECT_NE(outcomes[0].error.find("OMPI_MCA_pmix_server_uri=file:"), std::string::npos)
      << outcomes[0].error;
}

// An ompi-server of the test's own, stopped when destroyed; uri() is what ranks set
// OMPI_MCA_pmix_server_uri to (without "file:").
class OmpiServer {
 public:
  explicit OmpiServer(const std::string& name)
      : dir_(std::filesystem::temp_directory_path() /
             ("cortado-" + name + "-" + std::to_string(getpid()))) {
    std::filesystem::create_directories(dir_);
    uri_ = dir_ / "uri";
    pid_ = fork();
    if (pid_ == 0) {
      execlp("ompi-server", "ompi-server", "--no-daemonize", "--report-uri", uri_.c_str(),
             static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 100; ++i) {
      if (std::filesystem::exists(uri_) && std::filesystem::file_size(uri_) > 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~OmpiServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  OmpiServer(const OmpiServer&) = delete;
  OmpiServer& operator=(const OmpiServer&) = delete;

  bool started() const { return pid_ > 0 && std::filesystem::exists(uri_); }
  const std::string& uri() const { return uri_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::string uri_;
  pid_t pid_ = -1;
};

bool HaveOmpiServer() { return std::system("command -v ompi-server > /dev/null 2>&1") == 0; }

TEST(MpiJoinTest, ThreeProcessesJoinThroughOmpiServer) {
  if (UnderMpirun()) GTEST_SKIP() << "runs outside mpirun";
  if (!HaveOmpiServer()) GTEST_SKIP() << "no ompi-server (openmpi-bin)";
  OmpiServer server("ompi-server");
  ASSERT_TRUE(server.started()) << "ompi-server wrote no URI";
  const std::string uri = server.uri();
  const std::string token = "join-test-" + std::to_string(getpid());
  const std::vector<testing::RankOutcome> outcomes = testing::RunRanksAsProcesses(
      3,
      [&](int rank) -> std::string {
        setenv("OMPI_MCA_pmix_server_uri", ("file:" + uri).c_str(), 1);
        comm::CommOptions options;
        options.backend = "mpi";
        options.world_size = 3;
        options.rank = rank;
        options.token = token;
        options.connect_timeout_s = 30;
        options.timeout_s = 30;
        std::unique_ptr<comm::Communicator> c = comm::CreateCommunicator(options);
        if (c->rank() != rank || c->size() != 3) {
          CORTADO_THROW(kInternal, "joined as rank {} of {}", c->rank(), c->size());
        }
        Exercise(c.get());
        // Abort from another thread releases rank 0 from an allreduce the others never join,
        // and the communicator stays broken. (Not under mpirun: a process that leaves a
        // collective behind cannot finalise MPI, which mpirun reports as a failure.)
        if (rank != 0) return "ok";
        std::thread aborter([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          c->Abort("stopped by the test");
        });
        const auto start = std::chrono::steady_clock::now();
        std::string message;
        try {
          float x = 1;
          c->AllReduce(&x, 1);
        } catch (const Error& e) {
          if (e.code() == ErrorCode::kAborted) message = e.what();
        }
        aborter.join();
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (message.find("stopped by the test") == std::string::npos || seconds > 5) {
          CORTADO_THROW(kInternal, "abort: '{}' after {} s", message, seconds);
        }
        try {
          c->Barrier();
        } catch (const Error&) {
          return "ok";
        }
        CORTADO_THROW(kInternal, "the aborted communicator still works");
      },
      90);
  for (const auto& outcome : outcomes) {
    EXPECT_TRUE(outcome.ok) << testing::Describe(outcomes);
  }
}

TEST(MpiJoinTest, ARankThatNeverJoinsIsNamedWithinTheTimeout) {
  if (UnderMpirun()) GTEST_SKIP() << "runs outside mpirun";
  if (!HaveOmpiServer()) GTEST_SKIP() << "no ompi-server (openmpi-bin)";
  constexpr double kTimeoutS = 4;
  // Rank 2 missing: ranks 0 and 1 wait in MPI_Comm_accept. Rank 1 missing: rank 0 waits in
  // the accept, rank 2 for its turn.
  for (const int missing : {2, 1}) {
    SCOPED_TRACE("rank " + std::to_string(missing) + " missing");
    OmpiServer server("ompi-missing-" + std::to_string(missing));
    ASSERT_TRUE(server.started()) << "ompi-server wrote no URI";
    const std::string token = "missing-test-" + std::to_string(getpid());
    const std::vector<int> started = missing == 2 ? std::vector<int>{0, 1} : std::vector<int>{0, 2};
    const std::vector<testing::RankOutcome> outcomes = testing::RunRanksAsProcesses(
        2,
        [&](int index) -> std::string {
          const int rank = started[index];
          setenv("OMPI_MCA_pmix_server_uri", ("file:" + server.uri()).c_str(), 1);
          comm::CommOptions options;
          options.backend = "mpi";
          options.world_size = 3;
          options.rank = rank;
          options.token = token;
          options.connect_timeout_s = kTimeoutS;
          const auto start = std::chrono::steady_clock::now();
          std::string report;
          try {
            comm::CreateCommunicator(options);
            report = "joined";
          } catch (const Error& e) {
            const double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            report = std::string(ErrorCodeName(e.code())) + "|" + std::to_string(seconds) + "|" +
                     e.what();
          }
          // Leave as a process ends normally (atexit handlers, static destructors), with a
          // thread still blocked in MPI_Comm_accept: the report goes through a file.
          std::ofstream(server.dir() / ("rank-" + std::to_string(rank))) << report;
          std::exit(0);
        },
        60);
    for (size_t index = 0; index < started.size(); ++index) {
      const int rank = started[index];
      SCOPED_TRACE("rank " + std::to_string(rank));
      EXPECT_EQ(outcomes[index].error, "exited with status 0 without a report")
          << "the process did not exit normally";
      std::ifstream file(server.dir() / ("rank-" + std::to_string(rank)));
      const std::string report((std::istreambuf_iterator<char>(file)),
                               std::istreambuf_iterator<char>());
      const size_t bar1 = report.find('|');
      const size_t bar2 = report.find('|', bar1 + 1);
      ASSERT_NE(bar2, std::string::npos) << report;
      EXPECT_EQ(report.substr(0, bar1), "timeout") << report;
      EXPECT_LT(std::stod(report.substr(bar1 + 1, bar2 - bar1 - 1)), kTimeoutS + 5) << report;
      const std::string message = report.substr(bar2 + 1);
      EXPECT_NE(message.find("rank " + std::to_string(missing) +
                             " did not join the mpi communicator within 4 s"),
                std::string::npos)
          << message;
    }
  }
}

}  // namespace
}  // namespace cortado
#endif  // CORTADO_WITH_MPI
