// SPDX-License-Identifier: Apache-2.0
// ReLU on the GPU: the same rules as relu_layer.cpp, four elements per thread where the pointers
// allow; in a 16-bit type (Layer::HalfTensors) on its values, which a ReLU keeps exactly (a
// negative slope rounds once).
#include <cstdint>

#include "core/cuda.hpp"
#include "layers/half_values.cuh"
#include "layers/relu_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

using half_values::Narrow;
using half_values::PackAligned;
using half_values::Widen;

// Packs of V values from element `first` (four where every pointer allows, see Launch).
template <typename T, int V>
__global__ void ReLUForward(int64_t units, int64_t first, const T* x, float slope, T* y) {
  x += first;
  y += first;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < units;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const half_values::Vec<T, V> in = half_values::LoadVec<T, V>(x, q);
    half_values::Vec<T, V> out;
    for (int k = 0; k < V; ++k) {
      const float v = Widen(in.v[k]);
      out.v[k] = Narrow<T>(v > 0.0f ? v : v * slope);
    }
    half_values::StoreVec<T, V>(y, q, out);
  }
}

template <typename T, int V>
__global__ void ReLUBackward(int64_t units, int64_t first, const T* sign_source, const T* dy,
                             float slope, T* dx) {
  sign_source += first;
  dy += first;
  dx += first;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < units;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const half_values::Vec<T, V> sign = half_values::LoadVec<T, V>(sign_source, q);
    const half_values::Vec<T, V> d = half_values::LoadVec<T, V>(dy, q);
    half_values::Vec<T, V> out;
    for (int k = 0; k < V; ++k) {
      const float g = Widen(d.v[k]);
      out.v[k] = Narrow<T>(Widen(sign.v[k]) > 0.0f ? g : g * slope);
    }
    half_values::StoreVec<T, V>(dx, q, out);
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
    T* y = half_values::MutableData<T>(*top[0], half);
    half_values::InPacksOfFour(
        n, PackAligned<T>(x) && PackAligned<T>(y), [&](auto v, int64_t units, int64_t first) {
          ReLUForward<T, decltype(v)::value>
              <<<half_values::PackBlocks(units), cuda::kThreads, 0, stream>>>(units, first, x,
                                                                              slope, y);
          CORTADO_CUDA_CHECK_LAUNCH();
        });
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
    T* dx = half_values::MutableDiff<T>(*bottom[0], half);
    const bool aligned = PackAligned<T>(sign_source) && PackAligned<T>(dy) && PackAligned<T>(dx);
    half_values::InPacksOfFour(n, aligned, [&](auto v, int64_t units, int64_t first) {
      ReLUBackward<T, decltype(v)::value>
          <<<half_values::PackBlocks(units), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
              units, first, sign_source, dy, slope, dx);
      CORTADO_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace cortado
