// SPDX-License-Identifier: Apache-2.0
// Silence on the GPU: Forward does nothing; Backward zeroes the diffs of the bottoms asked for,
// as silence_layer.cpp does.
#include "layers/silence_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {

void SilenceLayer::ForwardGpu(const std::vector<Tensor*>& /*bottom*/,
                              const std::vector<Tensor*>& /*top*/) {}

void SilenceLayer::BackwardGpu(const std::vector<Tensor*>& /*top*/,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  for (size_t i = 0; i < bottom.size(); ++i) {
    if (propagate_down[i]) {
      math::gpu::Set(*ctx_, bottom[i]->count(), 0.0f, bottom[i]->mutable_gpu_diff());
    }
  }
}

}  // namespace cortado
