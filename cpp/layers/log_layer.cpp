// SPDX-License-Identifier: Apache-2.0
#include "layers/log_layer.hpp"

#include <cmath>

#include "math/math.hpp"

namespace cortado {

void LogLayer::Setup(const std::vector<Tensor*>& /*bottom*/, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.log_param();
  const float base = p.base();
  if (base != -1.0f && !(base > 0.0f && base != 1.0f)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: log_param.base must be positive and not 1 (or -1 for e), got {}", Describe(),
                  base);
  }
  const float log_base = base == -1.0f ? 1.0f : std::log(base);
  if (!std::isfinite(log_base)) {
    CORTADO_THROW(kInvalidArgument, "{}: log_param.base {} has no finite logarithm", Describe(),
                  base);
  }
  base_scale_ = 1.0f / log_base;
  input_scale_ = p.scale();
  input_shift_ = p.shift();
}

void LogLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  top[0]->ReshapeLike(*bottom[0]);
  if (bottom[0] == top[0]) bottom_copy_.ReshapeLike(*bottom[0]);
}

void LogLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (bottom[0] == top[0]) {
    math::Copy(n, bottom[0]->cpu_data(), bottom_copy_.mutable_cpu_data());
  }
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const float base_scale = base_scale_, scale = input_scale_, shift = input_shift_;
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) y[i] = base_scale * std::log(shift + scale * x[i]);
}

void LogLayer::BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* x = bottom[0] == top[0] ? bottom_copy_.cpu_data() : bottom[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const float numerator = input_scale_ * base_scale_, scale = input_scale_, shift = input_shift_;
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) dx[i] = dy[i] * numerator / (shift + scale * x[i]);
}

CORTADO_REGISTER_LAYER(Log, LogLayer);

}  // namespace cortado
