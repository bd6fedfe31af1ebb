// SPDX-License-Identifier: Apache-2.0
// Sets an environment variable for one scope (the switches Cortado reads when a plan is built,
// such as CORTADO_CUDNN_API, and those NetOptionsFromEnvironment reads), or unsets it (a null
// value), restoring the old value after.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace cortado::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace cortado::testing
