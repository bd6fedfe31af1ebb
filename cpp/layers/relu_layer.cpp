// SPDX-License-Identifier: Apache-2.0
#include "layers/relu_layer.hpp"

#include <algorithm>

#include "math/math.hpp"

namespace cortado {

bool ReLULayer::KeepsBottom(const std::vector<Tensor*>& bottom,
                            const std::vector<Tensor*>& top) const {
  return bottom[0] == top[0] && param_.relu_param().negative_slope() < 0.0f;
}

void ReLULayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  top[0]->ReshapeLike(*bottom[0]);
  if (KeepsBottom(bottom, top)) bottom_copy_.ReshapeLike(*bottom[0]);
}

void ReLULayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const float slope = param_.relu_param().negative_slope();
  const bool kept = SameCpuBlocks({bottom[0], top[0]});  // element by element: any layout
  if (KeepsBottom(bottom, top))
    math::Copy(n, bottom[0]->cpu_data_kept(kept), bottom_copy_.mutable_cpu_data());
  const float* x = bottom[0]->cpu_data_kept(kept);
  float* y = top[0]->mutable_cpu_data_kept(kept);
  if (slope == 0.0f) {
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
    for (int i = 0; i < n; ++i) y[i] = std::max(x[i], 0.0f);
  } else {
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
    for (int i = 0; i < n; ++i) y[i] = std::max(x[i], 0.0f) + slope * std::min(x[i], 0.0f);
  }
}

void ReLULayer::BackwardCpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float slope = param_.relu_param().negative_slope();
  // x > 0 exactly when y > 0 for slope >= 0, so the top data decides the branch (it is all we
  // have in place); a negative slope in place reads the copy taken in Forward.
  // The copy is in the layout Forward read (the same as now: a net sets blocks once).
  const bool kept = SameCpuBlocks({bottom[0], top[0]});
  const float* sign_source =
      KeepsBottom(bottom, top)
          ? bottom_copy_.cpu_data()
          : (slope < 0.0f ? bottom[0]->cpu_data_kept(kept) : top[0]->cpu_data_kept(kept));
  const float* dy = top[0]->cpu_diff_kept(kept);
  float* dx = bottom[0]->mutable_cpu_diff_kept(kept);
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) dx[i] = sign_source[i] > 0.0f ? dy[i] : dy[i] * slope;
}

CORTADO_REGISTER_LAYER(ReLU, ReLULayer);

}  // namespace cortado
