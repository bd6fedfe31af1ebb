// SPDX-License-Identifier: Apache-2.0
// Image files: bytes decoded as a JPEG or PNG image (what an encoded datum or a Spark binary
// column holds) in each color mode, then resized as -resize does.
#include <cstddef>
#include <cstdint>

#include "data/image_codec.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cortado::fuzz::SetUpOnce();
  for (cortado::ColorMode mode :
       {cortado::ColorMode::kKeep, cortado::ColorMode::kColor, cortado::ColorMode::kGray}) {
    cortado::fuzz::ExpectErrorsOnly([&] {
      const cortado::DecodedImage image = cortado::DecodeImage(data, size, mode, "fuzz");
      // Small images only: a large one takes the fuzzer's time without new paths.
      if (int64_t{image.height} * image.width <= 4096) cortado::ResizeImage(image, 5, 3);
    });
  }
  return 0;
}
