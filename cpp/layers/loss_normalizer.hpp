// SPDX-License-Identifier: Apache-2.0
// The divisor of a loss under LossParameter.normalization (Caffe's LossLayer::GetNormalizer),
// shared by the loss layers that take `normalization`.
#pragma once

#include <algorithm>

#include "proto/caffe.pb.h"

namespace cortado {

// FULL: every position (outer * inner); VALID: the positions not ignored (valid_count, or every
// position when valid_count is -1); BATCH_SIZE: outer; NONE: 1. Never below 1, so a batch
// whose labels are all ignored does not divide by zero.
inline float LossNormalizer(caffe::LossParameter::NormalizationMode mode, int outer, int inner,
                            int valid_count) {
  float normalizer = 1.0f;
  switch (mode) {
    case caffe::LossParameter::FULL:
      normalizer = static_cast<float>(outer) * static_cast<float>(inner);
      break;
    case caffe::LossParameter::VALID:
      normalizer = valid_count == -1 ? static_cast<float>(outer) * static_cast<float>(inner)
                                     : static_cast<float>(valid_count);
      break;
    case caffe::LossParameter::BATCH_SIZE:
      normalizer = static_cast<float>(outer);
      break;
    case caffe::LossParameter::NONE:
      normalizer = 1.0f;
      break;
  }
  return std::max(1.0f, normalizer);
}

}  // namespace cortado
