// SPDX-License-Identifier: Apache-2.0
// `cortado convert_idx`: Caffe's convert_mnist_data. Converts IDX image and label files (MNIST,
// Fashion-MNIST; plain or .gz) into an LMDB of caffe::Datum; the work is in data/idx_convert.
#include <cstdio>
#include <filesystem>

#include "core/error.hpp"
#include "data/idx_convert.hpp"
#include "tools/commands.hpp"
#include "tools/flags.hpp"

namespace cortado::tools {

int ConvertIdxCommand(int argc, char** argv) {
  const std::vector<FlagSpec> specs = {
      {"images", "", "IDX image file (e.g. train-images-idx3-ubyte[.gz])"},
      {"labels", "", "IDX label file (e.g. train-labels-idx1-ubyte[.gz])"},
      {"out", "", "database directory to create"},
      {"backend", "lmdb", "database backend: lmdb"},
      {"shuffle", "false", "write the records in a random order"},
      {"seed", "0", "random seed for --shuffle"},
      {"overwrite", "false", "replace an existing --out"},
  };
  Flags flags(argc, argv, 2, specs);
  if (flags.Get("images").empty() || flags.Get("labels").empty() || flags.Get("out").empty()) {
    CORTADO_THROW(kInvalidArgument, "cortado convert_idx needs --images, --labels and --out\n{}",
                  Flags::Usage(specs));
  }
  IdxConvertOptions options;
  options.images = flags.Get("images");
  options.labels = flags.Get("labels");
  options.out = flags.Get("out");
  options.backend = flags.Get("backend");
  options.shuffle = flags.GetBool("shuffle");
  options.seed = static_cast<uint32_t>(flags.GetInt("seed"));
  options.overwrite = flags.GetBool("overwrite");
  std::error_code ec;
  if (!options.overwrite && std::filesystem::exists(options.out, ec)) {
    CORTADO_THROW(kInvalidArgument, "output '{}' already exists (pass --overwrite to replace it)",
                  options.out);
  }
  const int64_t written = ConvertIdx(options);
  std::printf("Wrote %lld records to %s\n", static_cast<long long>(written), options.out.c_str());
  return 0;
}

}  // namespace cortado::tools
