// SPDX-License-Identifier: Apache-2.0
#include "layers/elu_layer.hpp"

#include <cmath>

#include "math/math.hpp"

namespace cortado {

void ELULayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  top[0]->ReshapeLike(*bottom[0]);
  if (KeepsBottom(bottom, top)) bottom_copy_.ReshapeLike(*bottom[0]);
}

void ELULayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const float alpha = param_.elu_param().alpha();
  if (KeepsBottom(bottom, top))
    math::Copy(n, bottom[0]->cpu_data(), bottom_copy_.mutable_cpu_data());
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : alpha * (std::exp(x[i]) - 1.0f);
}

void ELULayer::BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float alpha = param_.elu_param().alpha();
  // In place the bottom data is the top data: fine for alpha >= 0 (see the header).
  const float* x = KeepsBottom(bottom, top) ? bottom_copy_.cpu_data() : bottom[0]->cpu_data();
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : dy[i] * (y[i] + alpha);
}

CORTADO_REGISTER_LAYER(ELU, ELULayer);

}  // namespace cortado
