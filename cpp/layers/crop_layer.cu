// SPDX-License-Identifier: Apache-2.0
// Crop on the GPU: one thread per top element, which finds its element of bottom[0] from its
// index in the window; Backward zeroes bottom[0]'s diff and scatters the top diff into the
// window (each bottom element receives at most one value, so no atomics are needed).
#include "core/cuda.hpp"
#include "layers/crop_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

// The window's shape, and for each axis the stride of bottom[0]; `base` is the bottom index of
// the window's first element.
struct Window {
  int num_axes;
  int shape[Tensor::kMaxAxes];
  int64_t big_stride[Tensor::kMaxAxes];
  int64_t base;
};

__device__ int64_t BigIndex(const Window& w, int64_t i) {
  int64_t big = w.base;
  for (int a = w.num_axes - 1; a >= 0; --a) {
    const int64_t q = i / w.shape[a];
    big += (i - q * w.shape[a]) * w.big_stride[a];
    i = q;
  }
  return big;
}

__global__ void CropForward(int64_t n, Window w, const float* in, float* out) {
  CORTADO_KERNEL_LOOP(i, n) out[i] = in[BigIndex(w, i)];
}

__global__ void CropBackward(int64_t n, Window w, const float* top_diff, float* diff) {
  CORTADO_KERNEL_LOOP(i, n) diff[BigIndex(w, i)] = top_diff[i];
}

Window MakeWindow(const Tensor& big, const Tensor& small, const std::vector<int>& offsets) {
  Window w{};
  w.num_axes = big.num_axes();
  int64_t stride = 1;
  for (int a = w.num_axes - 1; a >= 0; --a) {
    w.shape[a] = small.shape(a);
    w.big_stride[a] = stride;
    w.base += offsets[a] * stride;
    stride *= big.shape(a);
  }
  return w;
}

}  // namespace

void CropLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int64_t n = top[0]->count();
  if (n == 0) return;
  CropForward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, MakeWindow(*bottom[0], *top[0], offsets_), bottom[0]->gpu_data(),
      top[0]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void CropLayer::BackwardGpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  float* diff = bottom[0]->mutable_gpu_diff();
  math::gpu::Set(*ctx_, bottom[0]->count(), 0.0f, diff);
  const int64_t n = top[0]->count();
  if (n == 0) return;
  CropBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      n, MakeWindow(*bottom[0], *top[0], offsets_), top[0]->gpu_diff(), diff);
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
