// SPDX-License-Identifier: Apache-2.0
// Runs the built `cortado` binary (CORTADO_CLI_PATH, or the CORTADO_CLI environment variable
// when the test binary runs away from its build folder) for the CLI tests and collects its exit
// status and its stdout and stderr together.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace cortado::cli_testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr, interleaved
  bool Contains(const std::string& text) const { return output.find(text) != std::string::npos; }
};

// Runs `cortado args...`, or `launcher... cortado args...` (e.g. mpirun -np 2; found on PATH).
// `on_output`, when given, sees the output collected so far after each read, and may signal the
// child (it gets the child's pid); it returns true once it is done.
inline CliResult RunCli(const std::vector<std::string>& args,
                        const std::function<bool(const std::string&, pid_t)>& on_output = {},
                        const std::vector<std::string>& launcher = {}) {
  CliResult result;
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe failed";
    return result;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return result;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    setenv("CORTADO_LOG_LEVEL", "info", 1);  // the tests read the INFO lines
    const char* cli = std::getenv("CORTADO_CLI");
    std::vector<std::string> argv_strings = launcher;
    argv_strings.push_back(cli != nullptr ? cli : CORTADO_CLI_PATH);
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  bool done = !on_output;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.output.append(buffer, static_cast<size_t>(n));
    if (!done) done = on_output(result.output, pid);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace cortado::cli_testing
