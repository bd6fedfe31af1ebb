// SPDX-License-Identifier: Apache-2.0
#include "layers/bnll_layer.hpp"

#include <algorithm>
#include <cmath>

#include "math/math.hpp"

namespace cortado {

void BNLLLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  top[0]->ReshapeLike(*bottom[0]);
  if (bottom[0] == top[0]) bottom_copy_.ReshapeLike(*bottom[0]);
}

void BNLLLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (bottom[0] == top[0]) math::Copy(n, bottom[0]->cpu_data(), bottom_copy_.mutable_cpu_data());
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  // exp never sees a positive argument, so nothing overflows (Caffe's branch).
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) {
    y[i] = x[i] > 0.0f ? x[i] + std::log1p(std::exp(-x[i])) : std::log1p(std::exp(x[i]));
  }
}

void BNLLLayer::BackwardCpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* x = bottom[0] == top[0] ? bottom_copy_.cpu_data() : bottom[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) {
    const float e = std::exp(std::min(x[i], kBNLLThreshold));
    dx[i] = dy[i] * e / (e + 1.0f);
  }
}

CORTADO_REGISTER_LAYER(BNLL, BNLLLayer);

}  // namespace cortado
