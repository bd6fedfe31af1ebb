// SPDX-License-Identifier: Apache-2.0
// ReLU on the GPU: the same rules as relu_layer.cpp, one element per thread; in a 16-bit type
// (Layer::HalfTensors) on its values, which a ReLU keeps exactly (a negative slope rounds once).
#include "core/cuda.hpp"
#include "layers/half_values.cuh"
#include "layers/relu_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

using half_values::Narrow;
using half_values::Widen;

template <typename T>
__global__ void ReLUForward(int n, const T* x, float slope, T* y) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float v = Widen(x[i]);
    y[i] = Narrow<T>(v > 0.0f ? v : v * slope);
  }
}

template <typename T>
__global__ void ReLUBackward(int n, const T* sign_source, const T* dy, float slope, T* dx) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float d = Widen(dy[i]);
    dx[i] = Narrow<T>(Widen(sign_source[i]) > 0.0f ? d : d * slope);
  }
}

}  // namespace

void ReLULayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const float slope = param_.relu_param().negative_slope();
  const HalfType half = HalfTensors();
  half_values::WithValueType(half, [&](auto tag) {
    using T = decltype(tag);
    const cudaStream_t stream = cuda::Stream(*ctx_);
    if (KeepsBottom(bottom, top)) {
      if (bottom_copy_.home_type() != half) {
        bottom_copy_.set_home_type(half);
        bottom_copy_.ReshapeLike(*bottom[0]);
      }
      CORTADO_CUDA_CHECK(cudaMemcpyAsync(half_values::MutableData<T>(bottom_copy_, half),
                                         half_values::Data<T>(*bottom[0], half), sizeof(T) * n,
                                         cudaMemcpyDeviceToDevice, stream));
    }
    const T* x = half_values::Data<T>(*bottom[0], half);
    ReLUForward<T><<<cuda::Blocks(n), cuda::kThreads, 0, stream>>>(
        n, x, slope, half_values::MutableData<T>(*top[0], half));
    CORTADO_CUDA_CHECK_LAUNCH();
  });
}

void ReLULayer::BackwardGpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float slope = param_.relu_param().negative_slope();
  const HalfType half = HalfTensors();
  half_values::WithValueType(half, [&](auto tag) {
    using T = decltype(tag);
    const T* sign_source = KeepsBottom(bottom, top)
                               ? half_values::Data<T>(bottom_copy_, half)
                               : half_values::Data<T>(slope < 0.0f ? *bottom[0] : *top[0], half);
    const T* dy = half_values::Diff<T>(*top[0], half);
    ReLUBackward<T><<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
        n, sign_source, dy, slope, half_values::MutableDiff<T>(*bottom[0], half));
    CORTADO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace cortado
