// SPDX-License-Identifier: Apache-2.0
// IDX files (MNIST's format, plain or gzip-compressed), read as images and as labels.
#include <cstddef>
#include <cstdint>

#include "data/idx_convert.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cortado::fuzz::SetUpOnce();
  static cortado::fuzz::InputFile file("input.idx");
  const std::string& path = file.Write(data, size);
  cortado::fuzz::ExpectErrorsOnly([&] { cortado::ReadIdxImages(path); });
  cortado::fuzz::ExpectErrorsOnly([&] { cortado::ReadIdxLabels(path); });
  return 0;
}
