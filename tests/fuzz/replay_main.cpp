// SPDX-License-Identifier: Apache-2.0
// Runs a fuzz target over files without libFuzzer: every file named on the command line, and
// every file inside a directory named there. The build without CORTADO_FUZZ links the targets
// with this, so the seed corpora run as tests with any compiler.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (!entry.is_regular_file()) continue;
        RunFile(entry.path());
        ++files;
      }
    } else {
      RunFile(arg);
      ++files;
    }
  }
  if (files == 0) {
    std::fprintf(stderr, "no inputs: name files or directories of inputs\n");
    return 2;
  }
  std::printf("%d inputs ran without a crash\n", files);
  return 0;
}
