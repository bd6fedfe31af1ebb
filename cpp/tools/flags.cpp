// SPDX-License-Identifier: Apache-2.0
#include "tools/flags.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "core/error.hpp"

namespace cortado::tools {

Flags::Flags(int argc, char** argv, int first, const std::vector<FlagSpec>& specs) {
  for (const auto& spec : specs) values_[spec.name] = spec.default_value;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      CORTADO_THROW(kInvalidArgument, "unexpected argument '{}'\n{}", arg, Usage(specs));
    }
    arg = arg.substr(arg[1] == '-' ? 2 : 1);
    if ((arg == "help" || arg == "h") && !values_.count(arg)) throw HelpRequested(Usage(specs));
    std::string name = arg;
    std::string value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    if (!values_.count(name)) {
      CORTADO_THROW(kInvalidArgument, "unknown flag '--{}'\n{}", name, Usage(specs));
    }
    if (!has_value) {
      if (i + 1 < argc && argv[i + 1][0] != '-') {
        value = argv[++i];
      } else {
        value = "true";
      }
    }
    values_[name] = value;
    set_[name] = true;
  }
}

const std::string& Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  CORTADO_CHECK(it != values_.end(), "flag '{}' not declared", name);
  return it->second;
}

int Flags::GetInt(const std::string& name) const {
  const std::string& value = Get(name);
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0') {
    CORTADO_THROW(kInvalidArgument, "--{} takes an integer, got '{}'", name, value);
  }
  // Never wrapped: 4294967297 is not 1.
  if (errno == ERANGE || parsed < std::numeric_limits<int>::min() ||
      parsed > std::numeric_limits<int>::max()) {
    CORTADO_THROW(kInvalidArgument, "--{}={} is out of range ({} to {})", name, value,
                  std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
  }
  return static_cast<int>(parsed);
}

bool Flags::GetBool(const std::string& name) const {
  const std::string& value = Get(name);
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0" || value.empty()) return false;
  CORTADO_THROW(kInvalidArgument, "--{} takes true or false, got '{}'", name, value);
}

std::string Flags::Usage(const std::vector<FlagSpec>& specs) {
  std::string out = "flags:\n";
  for (const auto& spec : specs) {
    out += fmt::format("  --{} ({}){}\n", spec.name, spec.help,
                       spec.default_value.empty() ? "" : " default: " + spec.default_value);
  }
  return out;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace cortado::tools
