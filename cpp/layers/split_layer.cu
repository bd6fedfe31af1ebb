// SPDX-License-Identifier: Apache-2.0
// Split on the GPU: the tops share the bottom's data, so Forward does nothing; Backward sums the
// tops' diffs into the bottom's diff in top order, as split_layer.cpp does.
#include "layers/split_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {

void SplitLayer::ForwardGpu(const std::vector<Tensor*>& /*bottom*/,
                            const std::vector<Tensor*>& /*top*/) {}

void SplitLayer::BackwardGpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  float* diff = bottom[0]->mutable_gpu_diff();
  size_t next = 1;
  if (top.size() == 1) {
    math::gpu::Copy(*ctx_, n, top[0]->gpu_diff(), diff);
  } else {  // the first two in one pass: t0 + t1 is what copying t0 and adding t1 gives
    math::gpu::Add(*ctx_, n, top[0]->gpu_diff(), top[1]->gpu_diff(), diff);
    next = 2;
  }
  for (size_t i = next; i < top.size(); ++i) {
    math::gpu::Axpy(*ctx_, n, 1.0f, top[i]->gpu_diff(), diff);
  }
}

}  // namespace cortado
