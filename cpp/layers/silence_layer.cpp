// SPDX-License-Identifier: Apache-2.0
#include "layers/silence_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void SilenceLayer::BackwardCpu(const std::vector<Tensor*>& /*top*/,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  for (size_t i = 0; i < bottom.size(); ++i) {
    if (propagate_down[i]) math::Set(bottom[i]->count(), 0.0f, bottom[i]->mutable_cpu_diff());
  }
}

CORTADO_REGISTER_LAYER(Silence, SilenceLayer);

}  // namespace cortado
