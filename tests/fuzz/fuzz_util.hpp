// SPDX-License-Identifier: Apache-2.0
// What the fuzz targets share: quiet logging, a bound on tensor memory, and inputs written to a
// file (the readers under test take paths, as users give them).
//
// Each target defines LLVMFuzzerTestOneInput. Built with clang and CORTADO_FUZZ, libFuzzer drives
// it; otherwise replay_main.cpp runs it over the files named on its command line (the seed
// corpus, as a test).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/logging.hpp"

namespace cortado::fuzz {

// Tensors may hold this much together: a hostile shape meets our kOutOfMemory, not the fuzzer's
// allocation limit.
constexpr size_t kTensorMemoryLimit = size_t{256} << 20;

// Once per process: logging off (errors are expected by the thousand) and the memory bound.
inline void SetUpOnce() {
  static const bool done = [] {
    SetLogLevel("off");
    SetHostMemoryLimit(kTensorMemoryLimit);
    return true;
  }();
  (void)done;
}

// A file of this process in the temporary directory, rewritten for every input.
class InputFile {
 public:
  explicit InputFile(const std::string& name) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/cortado-fuzz-" +
            std::to_string(::getpid()) + "-" + name;
  }
  ~InputFile() { std::remove(path_.c_str()); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& Write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) __builtin_trap();  // the harness itself is broken
    if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
    std::fclose(f);
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs body(); a cortado::Error is the expected answer to bad bytes. Anything else escapes and
// the fuzzer reports it (an uncaught exception aborts).
template <typename F>
void ExpectErrorsOnly(F&& body) {
  try {
    body();
  } catch (const Error&) {
  }
}

}  // namespace cortado::fuzz
