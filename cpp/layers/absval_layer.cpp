// SPDX-License-Identifier: Apache-2.0
#include "layers/absval_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void AbsValLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  top[0]->ReshapeLike(*bottom[0]);
  if (bottom[0] == top[0]) bottom_copy_.ReshapeLike(*bottom[0]);
}

void AbsValLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (bottom[0] == top[0]) {
    math::Copy(n, bottom[0]->cpu_data(), bottom_copy_.mutable_cpu_data());
  }
  math::Abs(n, bottom[0]->cpu_data(), top[0]->mutable_cpu_data());
}

void AbsValLayer::BackwardCpu(const std::vector<Tensor*>& top,
                              const std::vector<bool>& propagate_down,
                              const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* x = bottom[0] == top[0] ? bottom_copy_.cpu_data() : bottom[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) {
    const float sign = static_cast<float>((0.0f < x[i]) - (x[i] < 0.0f));
    dx[i] = dy[i] * sign;
  }
}

CORTADO_REGISTER_LAYER(AbsVal, AbsValLayer);

}  // namespace cortado
