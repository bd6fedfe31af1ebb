// SPDX-License-Identifier: Apache-2.0
#include "layers/sigmoid_layer.hpp"

#include <cmath>

#include "math/math.hpp"

namespace cortado {

void SigmoidLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) y[i] = 0.5f * std::tanh(0.5f * x[i]) + 0.5f;
}

void SigmoidLayer::BackwardCpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

CORTADO_REGISTER_LAYER(Sigmoid, SigmoidLayer);

}  // namespace cortado
