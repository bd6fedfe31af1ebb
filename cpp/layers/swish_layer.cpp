// SPDX-License-Identifier: Apache-2.0
#include "layers/swish_layer.hpp"

#include <cmath>

#include "math/math.hpp"

namespace cortado {

void SwishLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  top[0]->ReshapeLike(*bottom[0]);
  sigmoid_.ReshapeLike(*bottom[0]);
}

void SwishLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const float beta = param_.swish_param().beta();
  const float* x = bottom[0]->cpu_data();
  float* s = sigmoid_.mutable_cpu_data();
  float* y = top[0]->mutable_cpu_data();
  // Caffe scales x by beta, runs its Sigmoid layer (the tanh form) and multiplies by x.
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) {
    s[i] = 0.5f * std::tanh(0.5f * (beta * x[i])) + 0.5f;
    y[i] = x[i] * s[i];
  }
}

void SwishLayer::BackwardCpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float beta = param_.swish_param().beta();
  const float* y = top[0]->cpu_data();
  const float* s = sigmoid_.cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) dx[i] = dy[i] * (beta * y[i] + s[i] * (1.0f - beta * y[i]));
}

CORTADO_REGISTER_LAYER(Swish, SwishLayer);

}  // namespace cortado
