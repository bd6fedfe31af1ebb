// SPDX-License-Identifier: Apache-2.0
#include "layers/clip_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void ClipLayer::Setup(const std::vector<Tensor*>& /*bottom*/, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.clip_param();
  if (!param_.has_clip_param() || !p.has_min() || !p.has_max()) {
    CORTADO_THROW(kInvalidArgument, "{}: clip_param.min and clip_param.max are required",
                  Describe());
  }
  min_ = p.min();
  max_ = p.max();
  if (!(min_ <= max_)) {  // also refuses NaN bounds
    CORTADO_THROW(kInvalidArgument, "{}: clip_param.min ({}) must not exceed clip_param.max ({})",
                  Describe(), min_, max_);
  }
}

void ClipLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  top[0]->ReshapeLike(*bottom[0]);
  if (bottom[0] == top[0]) bottom_copy_.ReshapeLike(*bottom[0]);
}

void ClipLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  if (bottom[0] == top[0]) math::Copy(n, bottom[0]->cpu_data(), bottom_copy_.mutable_cpu_data());
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const float lo = min_, hi = max_;
  // NaN stays NaN (Caffe's CPU pass gives min there and its GPU pass max).
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) y[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
}

void ClipLayer::BackwardCpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* x = bottom[0] == top[0] ? bottom_copy_.cpu_data() : bottom[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const float lo = min_, hi = max_;
  // Caffe multiplies by the 0/1 mask, so a NaN or infinite dy outside the range still gives NaN.
#pragma omp parallel for if (n > math::kParallelThreshold) schedule(static)
  for (int i = 0; i < n; ++i) dx[i] = dy[i] * static_cast<float>(x[i] >= lo && x[i] <= hi);
}

CORTADO_REGISTER_LAYER(Clip, ClipLayer);

}  // namespace cortado
