// SPDX-License-Identifier: Apache-2.0
// Split on the GPU: the tops share the bottom's data, so Forward does nothing; Backward sums the
// tops' diffs into the bottom's diff in top order, as split_layer.cpp does. In a 16-bit type
// (Layer::HalfTensors) each sum is taken in float32 and rounded once.
#include <cstdint>

#include "core/cuda.hpp"
#include "layers/half_values.cuh"
#include "layers/split_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

using half_values::Narrow;
using half_values::Widen;

// out = a + b, or out += a with b == nullptr, over packs of V values from element `first`.
template <typename T, int V>
__global__ void AddValues(int64_t units, int64_t first, const T* a, const T* b, T* out) {
  a += first;
  if (b != nullptr) b += first;
  out += first;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < units;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const half_values::Vec<T, V> x = half_values::LoadVec<T, V>(a, q);
    const half_values::Vec<T, V> y = half_values::LoadVec<T, V>(b != nullptr ? b : out, q);
    half_values::Vec<T, V> r;
    for (int k = 0; k < V; ++k) r.v[k] = Narrow<T>(Widen(x.v[k]) + Widen(y.v[k]));
    half_values::StoreVec<T, V>(out, q, r);
  }
}

// diff = a + b (b given) or diff += a.
template <typename T>
void Add(cudaStream_t stream, int64_t n, const T* a, const T* b, T* diff) {
  const bool aligned = half_values::PackAligned<T>(a) && half_values::PackAligned<T>(b) &&
                       half_values::PackAligned<T>(diff);
  half_values::InPacksOfFour(n, aligned, [&](auto v, int64_t units, int64_t first) {
    AddValues<T, decltype(v)::value>
        <<<half_values::PackBlocks(units), cuda::kThreads, 0, stream>>>(units, first, a, b, diff);
    CORTADO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

// The tops read the bottom's home buffer: what was written through the bottom's twin goes there
// first.
void SplitLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                            const std::vector<Tensor*>& /*top*/) {
  bottom[0]->FlushTwins();
}

void SplitLayer::BackwardGpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const HalfType half = HalfTensors();
  if (half != HalfType::kNone) {
    half_values::WithValueType(half, [&](auto tag) {
      using T = decltype(tag);
      T* diff = half_values::MutableDiff<T>(*bottom[0], half);
      const cudaStream_t stream = cuda::Stream(*ctx_);
      if (top.size() == 1) {
        CORTADO_CUDA_CHECK(cudaMemcpyAsync(diff, half_values::Diff<T>(*top[0], half), sizeof(T) * n,
                                           cudaMemcpyDeviceToDevice, stream));
        return;
      }
      Add<T>(stream, n, half_values::Diff<T>(*top[0], half), half_values::Diff<T>(*top[1], half),
             diff);
      for (size_t i = 2; i < top.size(); ++i) {
        Add<T>(stream, n, half_values::Diff<T>(*top[i], half), static_cast<const T*>(nullptr),
               diff);
      }
    });
    return;
  }
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
