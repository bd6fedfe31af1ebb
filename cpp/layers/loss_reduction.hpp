// SPDX-License-Identifier: Apache-2.0
// The last step of the loss layers' GPU passes: sums per-element losses on the device and writes
// the loss top there, so the loss reaches the host only through the top blob. The sums run in a
// fixed order that depends only on the element count (in double), so they repeat bit for bit.
// Used by the layers' .cu files; available only where CORTADO_WITH_CUDA is 1.
#pragma once

#include "core/context.hpp"

namespace cortado {

struct GpuLossReduction {
  int n = 0;
  const float* loss = nullptr;  // per-element losses (device)
  bool square = false;          // sum loss[i]^2 instead of loss[i]
  // Per element (device, may be null): 1 counted, 0 ignored, -1 invalid (a label out of range).
  const float* count = nullptr;
  // Normalizer: max(1, number of counted elements) when count_normalizes (VALID), else
  // `normalizer` (from LossNormalizer on the host).
  bool count_normalizes = false;
  float normalizer = 1.0f;
  float divisor = 1.0f;             // a further division (EuclideanLoss's 2)
  float* top = nullptr;             // top[0] = float(sum) / normalizer / divisor (device)
  float* normalizer_out = nullptr;  // the normalizer used, for Backward (device; may be null)
};

// Queues the reduction on the context's stream. Returns a device pointer to the index of the
// first invalid element (-1 when none), which lives in the context's workspace: read it before
// anything else uses the workspace.
const int* ReduceLossGpu(Context& ctx, const GpuLossReduction& r);

// Waits for the context's stream and reads ReduceLossGpu's first invalid index (-1 when none).
int FirstInvalidIndex(Context& ctx, const int* first_invalid);
// Reads one float of device memory (the label a layer's error names) on the context's stream.
float ReadDeviceValue(Context& ctx, const float* value);

}  // namespace cortado
