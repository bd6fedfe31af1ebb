// SPDX-License-Identifier: Apache-2.0
#include "net/net_options.hpp"

#include <cstdlib>
#include <cstring>

namespace cortado {
namespace {

// False when the variable is set to exactly "0".
bool NotZero(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || std::strcmp(value, "0") != 0;
}

// True when the variable is set to exactly "1".
bool IsOne(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace

NetOptions NetOptionsFromEnvironment() {
  NetOptions options;
  options.fuse = NotZero("CORTADO_FUSE");
  options.fold_splits = NotZero("CORTADO_FOLD_SPLITS");
  options.share_buffers = NotZero("CORTADO_SHARE_BUFFERS");
  options.recompute = NotZero("CORTADO_RECOMPUTE");
  options.cpu_blocks = NotZero("CORTADO_CPU_BLOCKS");
  if (IsOne("CORTADO_BN_KEEP_INPUTS")) {
    options.keep_batch_norm_inputs = NetOptions::BatchNormInputs::kOnGpus;
  }
  if (!NotZero("CORTADO_FOLD_SUMS")) {
    options.fold_sums_into_batch_norms = NetOptions::SumFolds::kNever;
  } else if (IsOne("CORTADO_FOLD_SUMS")) {
    options.fold_sums_into_batch_norms = NetOptions::SumFolds::kAlways;
  }
  return options;
}

}  // namespace cortado
