// SPDX-License-Identifier: Apache-2.0
#include "layers/batch_reindex_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void BatchReindexLayer::Reshape(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  if (bottom[1]->num_axes() != 1) {
    CORTADO_THROW(kInvalidArgument, "{}: the indices (bottom 1) must be a 1-D tensor, got shape {}",
                  Describe(), bottom[1]->ShapeString());
  }
  if (bottom[0]->num_axes() < 1) {
    CORTADO_THROW(kInvalidArgument, "{}: the data (bottom 0) needs a batch axis, got shape {}",
                  Describe(), bottom[0]->ShapeString());
  }
  std::vector<int> shape = bottom[0]->shape();
  shape[0] = bottom[1]->shape(0);
  top[0]->Reshape(shape);
}

void BatchReindexLayer::CheckIndices(const std::vector<Tensor*>& bottom) const {
  const int num = bottom[0]->shape(0);
  const float* index = bottom[1]->cpu_data();
  for (int m = 0; m < bottom[1]->count(); ++m) {
    // As Caffe, the value itself must lie in [0, N) (so 2.5 picks row 2 of 3 and -0.5 fails).
    if (!(index[m] >= 0.0f && index[m] < static_cast<float>(num))) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: index {} at position {} of the indices is outside the batch [0, {})",
                    Describe(), index[m], m, num);
    }
  }
}

void BatchReindexLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                   const std::vector<Tensor*>& top) {
  CheckIndices(bottom);
  const int inner = bottom[0]->count(1);
  const float* in = bottom[0]->cpu_data();
  const float* index = bottom[1]->cpu_data();
  float* out = top[0]->mutable_cpu_data();
  for (int m = 0; m < bottom[1]->count(); ++m) {
    const int64_t n = static_cast<int>(index[m]);
    math::Copy(inner, in + n * inner, out + static_cast<int64_t>(m) * inner);
  }
}

void BatchReindexLayer::CheckIndexBackward(const std::vector<bool>& propagate_down) const {
  if (propagate_down[1]) {
    CORTADO_THROW(kInvalidArgument, "{} cannot backpropagate to its indices (bottom 1)",
                  Describe());
  }
}

void BatchReindexLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                    const std::vector<bool>& propagate_down,
                                    const std::vector<Tensor*>& bottom) {
  CheckIndexBackward(propagate_down);
  if (!propagate_down[0]) return;
  const int inner = bottom[0]->count(1);
  const float* index = bottom[1]->cpu_data();
  const float* dtop = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  math::Set(bottom[0]->count(), 0.0f, dx);
  // Indices were checked by Forward. Repeated indices accumulate.
  for (int m = 0; m < bottom[1]->count(); ++m) {
    const int64_t n = static_cast<int>(index[m]);
    math::Axpy(inner, 1.0f, dtop + static_cast<int64_t>(m) * inner, dx + n * inner);
  }
}

CORTADO_REGISTER_LAYER(BatchReindex, BatchReindexLayer);

}  // namespace cortado
