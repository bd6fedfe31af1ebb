// SPDX-License-Identifier: Apache-2.0
// Parameter on the GPU: a device copy forward and a device add backward (math/gpu.hpp).
#include "core/cuda.hpp"
#include "layers/parameter_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {

void ParameterLayer::ForwardGpu(const std::vector<Tensor*>& /*bottom*/,
                                const std::vector<Tensor*>& top) {
  math::gpu::Copy(*ctx_, blobs_[0]->count(), blobs_[0]->gpu_data(), top[0]->mutable_gpu_data());
}

void ParameterLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& /*propagate_down*/,
                                 const std::vector<Tensor*>& /*bottom*/) {
  if (!param_propagate_down(0)) return;
  math::gpu::Axpy(*ctx_, blobs_[0]->count(), 1.0f, top[0]->gpu_diff(),
                  blobs_[0]->mutable_gpu_diff());
}

}  // namespace cortado
