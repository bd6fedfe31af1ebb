// SPDX-License-Identifier: Apache-2.0
#include "layers/threshold_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void ThresholdLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  top[0]->ReshapeLike(*bottom[0]);
}

void ThresholdLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const float threshold = param_.threshold_param().threshold();
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) y[i] = x[i] > threshold ? 1.0f : 0.0f;
}

void ThresholdLayer::RefuseBackward(const std::vector<bool>& propagate_down) const {
  if (!propagate_down.empty() && propagate_down[0]) {
    // Caffe's ThresholdLayer::Backward_cpu is NOT_IMPLEMENTED (it aborts the process).
    CORTADO_THROW(kUnimplemented,
                  "{}: has no gradient (a step function; Caffe does not implement its Backward "
                  "either); set propagate_down: false on this layer's bottom",
                  Describe());
  }
}

void ThresholdLayer::BackwardCpu(const std::vector<Tensor*>& /*top*/,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& /*bottom*/) {
  RefuseBackward(propagate_down);
}

CORTADO_REGISTER_LAYER(Threshold, ThresholdLayer);

}  // namespace cortado
