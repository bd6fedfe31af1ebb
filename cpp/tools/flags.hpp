// SPDX-License-Identifier: Apache-2.0
// Command-line flags in Caffe's style: `--name=value`, `-name=value`, `--name value` and
// `-name value` all work; a bare `--name` is "true". Unknown flags are an error that lists
// the flags the command takes.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace cortado::tools {

struct FlagSpec {
  std::string name;
  std::string default_value;
  std::string help;
};

// Thrown by Flags for `--help` (`-help`, `-h`): what() is the command's flag list, which the
// tool prints to stdout before it exits with 0.
class HelpRequested : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Flags {
 public:
  // Parses argv[first..argc); throws kInvalidArgument for an unknown flag or a stray argument,
  // HelpRequested for --help.
  Flags(int argc, char** argv, int first, const std::vector<FlagSpec>& specs);

  const std::string& Get(const std::string& name) const;
  bool IsSet(const std::string& name) const { return set_.count(name) != 0; }
  int GetInt(const std::string& name) const;
  bool GetBool(const std::string& name) const;

  static std::string Usage(const std::vector<FlagSpec>& specs);

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> set_;
};

// "a,b,,c" -> {"a", "b", "c"}: a comma-separated flag value, empty items dropped.
std::vector<std::string> SplitList(const std::string& text);

}  // namespace cortado::tools
