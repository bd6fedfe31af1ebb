// SPDX-License-Identifier: Apache-2.0
#include "layers/exp_layer.hpp"

#include <cmath>

#include "math/math.hpp"

namespace cortado {

void ExpLayer::Setup(const std::vector<Tensor*>& /*bottom*/, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.exp_param();
  const float base = p.base();
  if (base != -1.0f && !(base > 0.0f)) {
    CORTADO_THROW(kInvalidArgument, "{}: exp_param.base must be positive (or -1 for e), got {}",
                  Describe(), base);
  }
  const float log_base = base == -1.0f ? 1.0f : std::log(base);
  if (!std::isfinite(log_base)) {
    CORTADO_THROW(kInvalidArgument, "{}: exp_param.base {} has no finite logarithm", Describe(),
                  base);
  }
  inner_scale_ = log_base * p.scale();
  // base^shift, written with exp for base e as Caffe does.
  outer_scale_ = p.shift() == 0.0f ? 1.0f
                 : base == -1.0f   ? std::exp(p.shift())
                                   : std::pow(base, p.shift());
}

void ExpLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const float inner = inner_scale_, outer = outer_scale_;
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) y[i] = outer * std::exp(inner * x[i]);
}

void ExpLayer::BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const float inner = inner_scale_;
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) dx[i] = dy[i] * y[i] * inner;
}

CORTADO_REGISTER_LAYER(Exp, ExpLayer);

}  // namespace cortado
