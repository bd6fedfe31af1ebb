// SPDX-License-Identifier: Apache-2.0
// Dropout on the GPU: the rules of dropout_layer.cpp with the mask drawn on the device (uniform
// numbers from the context's Philox generator, kept where the draw is >= dropout_ratio), so a
// reseeded context repeats it; Backward reuses the draws of the last train-time Forward. Values
// are float32 or the 16-bit type of Layer::HalfTensors.
#include "core/cuda.hpp"
#include "layers/dropout_layer.hpp"
#include "layers/half_values.cuh"
#include "math/gpu.hpp"

namespace cortado {
namespace {

using half_values::Narrow;
using half_values::Widen;

// out = in * scale where the draw keeps the element (every element without draws), else 0.
template <typename T>
__global__ void DropoutApply(int n, const T* in, const float* rand, float ratio, float scale,
                             T* out) {
  CORTADO_KERNEL_LOOP(i, n) {
    const bool kept = rand == nullptr || rand[i] >= ratio;
    out[i] = Narrow<T>(kept ? Widen(in[i]) * scale : 0.0f);
  }
}

// One pass of the layer, forward or backward: in to out through the train-time draws (null at
// test time, where every element is scaled by `scale`).
template <typename T>
void Apply(Context& ctx, int n, const T* in, const float* rand, float ratio, float scale, T* out) {
  const cudaStream_t stream = cuda::Stream(ctx);
  if (rand == nullptr && scale == 1.0f) {
    if (in != out) {
      CORTADO_CUDA_CHECK(cudaMemcpyAsync(out, in, sizeof(T) * n, cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  DropoutApply<T><<<cuda::Blocks(n), cuda::kThreads, 0, stream>>>(n, in, rand, ratio, scale, out);
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace

void DropoutLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int n = bottom[0]->count();
  const bool train = phase() == caffe::TRAIN;
  const float* rand = nullptr;
  if (train) {
    float* draws = rand_.mutable_gpu_data();
    math::gpu::RngUniform(*ctx_, n, 0.0f, 1.0f, draws);
    rand = draws;
  }
  const HalfType half = HalfTensors();
  half_values::WithValueType(half, [&](auto tag) {
    using T = decltype(tag);
    Apply<T>(*ctx_, n, half_values::Data<T>(*bottom[0], half), rand, ratio_,
             train ? train_scale_ : test_scale_, half_values::MutableData<T>(*top[0], half));
  });
}

void DropoutLayer::BackwardGpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const bool train = phase() == caffe::TRAIN;
  const float* rand = train ? rand_.gpu_data() : nullptr;
  const HalfType half = HalfTensors();
  half_values::WithValueType(half, [&](auto tag) {
    using T = decltype(tag);
    Apply<T>(*ctx_, n, half_values::Diff<T>(*top[0], half), rand, ratio_,
             train ? train_scale_ : test_scale_, half_values::MutableDiff<T>(*bottom[0], half));
  });
}

}  // namespace cortado
