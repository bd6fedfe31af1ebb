// SPDX-License-Identifier: Apache-2.0
#include "layers/split_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void SplitLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  for (size_t i = 0; i < top.size(); ++i) {
    if (top[i] == bottom[0]) {
      CORTADO_THROW(kInvalidArgument, "{}: top {} is the bottom; Split cannot run in place",
                    Describe(), i);
    }
    top[i]->ReshapeLike(*bottom[0]);
    top[i]->ShareData(*bottom[0]);
  }
}

void SplitLayer::BackwardCpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  float* diff = bottom[0]->mutable_cpu_diff();
  math::Copy(n, top[0]->cpu_diff(), diff);
  for (size_t i = 1; i < top.size(); ++i) math::Axpy(n, 1.0f, top[i]->cpu_diff(), diff);
}

CORTADO_REGISTER_LAYER(Split, SplitLayer);

}  // namespace cortado
