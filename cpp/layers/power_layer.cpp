// SPDX-License-Identifier: Apache-2.0
#include "layers/power_layer.hpp"

#include <cmath>

#include "math/math.hpp"

namespace cortado {

void PowerLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                       const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.power_param();
  power_ = p.power();
  scale_ = p.scale();
  shift_ = p.shift();
  diff_scale_ = power_ * scale_;
}

void PowerLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  top[0]->ReshapeLike(*bottom[0]);
  if (KeepsBottom(bottom, top)) bottom_copy_.ReshapeLike(*bottom[0]);
}

void PowerLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  float* y = top[0]->mutable_cpu_data();
  if (diff_scale_ == 0.0f) {
    // The output does not depend on x: 1 when power == 0, shift^power when scale == 0.
    math::Set(n, power_ == 0.0f ? 1.0f : std::pow(shift_, power_), y);
    return;
  }
  if (KeepsBottom(bottom, top))
    math::Copy(n, bottom[0]->cpu_data(), bottom_copy_.mutable_cpu_data());
  const float* x = bottom[0]->cpu_data();
  const float power = power_, scale = scale_, shift = shift_;
  if (power == 1.0f) {
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
    for (int i = 0; i < n; ++i) y[i] = shift + scale * x[i];
  } else {
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
    for (int i = 0; i < n; ++i) y[i] = std::pow(shift + scale * x[i], power);
  }
}

void PowerLayer::BackwardCpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  // In place dx and dy are the same buffer: every loop reads dy[i] before it writes dx[i].
  if (diff_scale_ == 0.0f) {
    math::Set(n, 0.0f, dx);
    return;
  }
  const float diff_scale = diff_scale_, scale = scale_, shift = shift_;
  if (power_ == 1.0f) {
    math::Scale(n, diff_scale, dy, dx);
    return;
  }
  const float* x = KeepsBottom(bottom, top) ? bottom_copy_.cpu_data() : bottom[0]->cpu_data();
  if (power_ == 2.0f) {
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
    for (int i = 0; i < n; ++i) dx[i] = dy[i] * diff_scale * (shift + scale * x[i]);
    return;
  }
  // dy/dx = power * scale * (shift + scale x)^(power - 1) = diff_scale * y / (shift + scale x),
  // reusing y from Forward rather than calling pow again (Caffe's choice).
  const float* y = top[0]->cpu_data();
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) dx[i] = dy[i] * diff_scale * y[i] / (shift + scale * x[i]);
}

CORTADO_REGISTER_LAYER(Power, PowerLayer);

}  // namespace cortado
