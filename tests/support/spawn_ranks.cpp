// SPDX-License-Identifier: Apache-2.0
#include "support/spawn_ranks.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>

namespace cortado::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

RankOutcome RunBody(const RankBody& body, int rank) {
  RankOutcome outcome;
  const auto start = Clock::now();
  try {
    outcome.result = body(rank);
    outcome.ok = true;
  } catch (const Error& e) {
    outcome.error = e.what();
    outcome.code = e.code();
  } catch (const std::exception& e) {
    outcome.error = e.what();
  } catch (...) {
    outcome.error = "unknown exception";
  }
  outcome.seconds = SecondsSince(start);
  return outcome;
}

// The report a child writes: ok, code (-1: none), seconds, result, error.
void AppendU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<char*>(&v), 8); }

std::string Encode(const RankOutcome& o) {
  std::string out;
  AppendU64(&out, o.ok ? 1 : 0);
  AppendU64(&out, o.code ? static_cast<uint64_t>(*o.code) : ~uint64_t{0});
  uint64_t seconds_bits;
  std::memcpy(&seconds_bits, &o.seconds, 8);
  AppendU64(&out, seconds_bits);
  AppendU64(&out, o.result.size());
  out += o.result;
  AppendU64(&out, o.error.size());
  out += o.error;
  return out;
}

bool Decode(const std::string& in, RankOutcome* o) {
  size_t pos = 0;
  auto u64 = [&](uint64_t* v) {
    if (pos + 8 > in.size()) return false;
    std::memcpy(v, in.data() + pos, 8);
    pos += 8;
    return true;
  };
  auto str = [&](std::string* s) {
    uint64_t n;
    if (!u64(&n) || pos + n > in.size()) return false;
    s->assign(in, pos, n);
    pos += n;
    return true;
  };
  uint64_t ok, code, seconds_bits;
  if (!u64(&ok) || !u64(&code) || !u64(&seconds_bits) || !str(&o->result) || !str(&o->error)) {
    return false;
  }
  o->ok = ok == 1;
  if (code != ~uint64_t{0}) o->code = static_cast<ErrorCode>(code);
  std::memcpy(&o->seconds, &seconds_bits, 8);
  return pos == in.size();
}

void WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string Describe(const std::vector<RankOutcome>& outcomes) {
  std::string text;
  for (size_t r = 0; r < outcomes.size(); ++r) {
    text += "rank " + std::to_string(r) + ": " + (outcomes[r].ok ? "ok" : outcomes[r].error) + "\n";
  }
  return text;
}

std::vector<RankOutcome> RunRanksAsThreads(int n, const RankBody& body) {
  std::vector<RankOutcome> outcomes(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { outcomes[r] = RunBody(body, r); });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

std::vector<RankOutcome> RunRanksAsProcesses(int n, const RankBody& body, double timeout_s) {
  struct Child {
    pid_t pid = -1;
    int pipe = -1;  // read end
    std::string report;
    bool eof = false;
  };
  std::vector<Child> children(n);
  const pid_t parent = ::getpid();
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      // The child: never return into gtest, never run atexit handlers.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(3);
      ::close(fds[0]);
      for (int i = 0; i < r; ++i) ::close(children[i].pipe);
      const RankOutcome outcome = RunBody(body, r);
      WriteAll(fds[1], Encode(outcome));
      ::close(fds[1]);
      ::_exit(0);
    }
    ::close(fds[1]);
    children[r].pid = pid;
    children[r].pipe = fds[0];
  }

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  while (true) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int r = 0; r < n; ++r) {
      if (!children[r].eof) {
        fds.push_back({children[r].pipe, POLLIN, 0});
        which.push_back(r);
      }
    }
    if (fds.empty()) break;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (rc < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Child& child = children[which[i]];
      char buffer[4096];
      const ssize_t got = ::read(child.pipe, buffer, sizeof(buffer));
      if (got > 0) {
        child.report.append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        child.eof = true;
      }
    }
  }

  std::vector<RankOutcome> outcomes(n);
  for (int r = 0; r < n; ++r) {
    Child& child = children[r];
    const bool timed_out = !child.eof;
    if (timed_out) ::kill(child.pid, SIGKILL);
    int status = 0;
    while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    ::close(child.pipe);
    RankOutcome& outcome = outcomes[r];
    if (timed_out) {
      outcome.error = "timed out after " + std::to_string(timeout_s) + " s (killed)";
      outcome.seconds = timeout_s;
    } else if (WIFSIGNALED(status)) {
      outcome.error = "killed by signal " + std::to_string(WTERMSIG(status));
    } else if (!Decode(child.report, &outcome)) {
      outcome = RankOutcome();
      outcome.error = "exited with status " +
                      std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                      " without a report";
    }
  }
  return outcomes;
}

}  // namespace cortado::testing
