// SPDX-License-Identifier: Apache-2.0
// HingeLoss on the GPU: the same results as hinge_loss_layer.cpp. The margins are computed per
// element and summed on the device; the one value read back is the index of the first element
// whose sample has an out-of-range label (-1 when none), so that bad labels throw as on the CPU.
#include "core/cuda.hpp"
#include "layers/hinge_loss_layer.hpp"
#include "layers/loss_reduction.hpp"

namespace cortado {
namespace {

// m[i] = max(0, 1 + t x[i]), t = -1 at the sample's label, else 1; invalid[i] = -1 (and m 0)
// where the sample's label is outside [0, dim).
__global__ void HingeMargin(int64_t count, int dim, const float* x, const float* label, float* m,
                            float* invalid) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int64_t n = i / dim;
    const int k = static_cast<int>(i % dim);
    const int l = static_cast<int>(label[n]);
    if (l < 0 || l >= dim) {
      m[i] = 0.0f;
      invalid[i] = -1.0f;
    } else {
      const float t = k == l ? -1.0f : 1.0f;
      m[i] = fmaxf(0.0f, 1.0f + t * x[i]);
      invalid[i] = 0.0f;
    }
  }
}

// L1: dx = t sign(m) scale; L2: dx = t m scale; scale = factor * w / N (w a device scalar).
__global__ void HingeBackward(int64_t count, int dim, const float* m, const float* label, bool l2,
                              const float* top_diff, float factor, float* dx) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int64_t n = i / dim;
    const int k = static_cast<int>(i % dim);
    const float scale = factor * top_diff[0];
    const float g = l2 ? m[i] : (m[i] > 0.0f ? 1.0f : 0.0f);
    dx[i] = (k == static_cast<int>(label[n]) ? -g : g) * scale;
  }
}

}  // namespace

void HingeLossLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  const int count = bottom[0]->count();
  invalid_.ReshapeLike(*bottom[0]);
  const float* label = bottom[1]->gpu_data();
  cudaStream_t stream = cuda::Stream(*ctx_);
  HingeMargin<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
      count, dim_, bottom[0]->gpu_data(), label, margin_.mutable_gpu_data(),
      invalid_.mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
  GpuLossReduction r;
  r.n = count;
  r.loss = margin_.gpu_data();
  r.square = IsL2();
  r.count = invalid_.gpu_data();
  r.normalizer = static_cast<float>(num_);
  r.top = top[0]->mutable_gpu_data();
  const int invalid = FirstInvalidIndex(*ctx_, ReduceLossGpu(*ctx_, r));
  if (invalid >= 0) {
    const int sample = invalid / dim_;
    ThrowBadLabel(sample, ReadDeviceValue(*ctx_, label + sample));
  }
}

void HingeLossLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  CheckLabelBackward(propagate_down);
  if (!propagate_down[0]) return;
  const int64_t count = bottom[0]->count();
  const bool l2 = IsL2();
  HingeBackward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      count, dim_, margin_.gpu_data(), bottom[1]->gpu_data(), l2, top[0]->gpu_diff(),
      (l2 ? 2.0f : 1.0f) / static_cast<float>(num_), bottom[0]->mutable_gpu_diff());
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
