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
  std::vector<const Tensor*> all(top.begin(), top.end());
  all.push_back(bottom[0]);
  const bool kept = SameCpuBlocks(all);  // element by element: any layout, all alike
  float* diff = bottom[0]->mutable_cpu_diff_kept(kept);
  if (top.size() == 2) {
    // The common case (a residual block's input), in one parallel pass: the same sums, in the
    // same order, as a copy and an Axpy.
    const float* a = top[0]->cpu_diff_kept(kept);
    const float* b = top[1]->cpu_diff_kept(kept);
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
    for (int i = 0; i < n; ++i) diff[i] = a[i] + b[i];
    return;
  }
  math::Copy(n, top[0]->cpu_diff_kept(kept), diff);
  for (size_t i = 1; i < top.size(); ++i) math::Axpy(n, 1.0f, top[i]->cpu_diff_kept(kept), diff);
}

CORTADO_REGISTER_LAYER(Split, SplitLayer);

}  // namespace cortado
