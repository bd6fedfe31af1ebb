// SPDX-License-Identifier: Apache-2.0
// InnerProduct on the GPU: the GEMMs of inner_product_layer.cpp on cuBLAS (or the fallback
// kernels), with the bias broadcast and summed through a vector of M ones. On half tensors
// (Layer::HalfTensors) the same GEMMs take 16-bit operands (math::gpu::GemmHalfOperands).
#include "core/cuda.hpp"
#include "layers/inner_product_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

// n ones on the device, refilled only when n changes.
const float* Ones(Context& ctx, int n, Tensor* ones) {
  if (ones->count() != n || ones->num_axes() != 1) {
    ones->Reshape(std::vector<int>{n});
    math::gpu::Set(ctx, n, 1.0f, ones->mutable_gpu_data());
  }
  return ones->gpu_data();
}

}  // namespace

const void* InnerProductLayer::HalfWeights(HalfType type) {
  const int64_t count = blobs_[0]->count();
  void* w = cuda::Get(*ctx_).HalfScratch(static_cast<size_t>(count) * 2);
  math::gpu::ToHalf(*ctx_, type, count, blobs_[0]->gpu_data(), w);
  return w;
}

void InnerProductLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                   const std::vector<Tensor*>& top) {
  if (const HalfType half = HalfTensors(); half != HalfType::kNone) {
    const void* x = bottom[0]->gpu_half_data(half);
    void* y = top[0]->mutable_gpu_half_data(half);
    float beta = 0.0f;
    if (bias_term_) {
      // y = ones * b with the bias rounded to the 16-bit type, as the weights are.
      Ones(*ctx_, m_, &ones_gpu_);
      math::gpu::GemmHalfOperands(*ctx_, half, false, false, m_, n_, 1, 1.0f,
                                  ones_gpu_.gpu_half_data(half), blobs_[1]->gpu_half_data(half),
                                  0.0f, y, true);
      beta = 1.0f;
    }
    math::gpu::GemmHalfOperands(*ctx_, half, false, !transpose_, m_, n_, k_, 1.0f, x,
                                HalfWeights(half), beta, y, true);
    return;
  }
  const float* x = bottom[0]->gpu_data();
  const float* w = blobs_[0]->gpu_data();
  float* y = top[0]->mutable_gpu_data();
  float beta = 0.0f;
  if (bias_term_) {
    // y (M x N) = ones (M x 1) * b (1 x N): every row starts from the bias.
    math::gpu::Gemm(*ctx_, false, false, m_, n_, 1, 1.0f, Ones(*ctx_, m_, &ones_gpu_),
                    blobs_[1]->gpu_data(), 0.0f, y);
    beta = 1.0f;
  }
  // y (M x N) += x (M x K) * W^T (operands in the context's half type under mixed precision), where
  // W is N x K (or K x N when transposed).
  math::gpu::GemmMixed(*ctx_, false, !transpose_, m_, n_, k_, 1.0f, x, w, beta, y);
}

void InnerProductLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                    const std::vector<bool>& propagate_down,
                                    const std::vector<Tensor*>& bottom) {
  if (const HalfType half = HalfTensors(); half != HalfType::kNone) {
    const void* dy = top[0]->gpu_half_diff(half);
    if (param_propagate_down(0)) {
      const void* x = bottom[0]->gpu_half_data(half);
      float* dw = blobs_[0]->mutable_gpu_diff();
      if (transpose_) {
        math::gpu::GemmHalfOperands(*ctx_, half, true, false, k_, n_, m_, 1.0f, x, dy, 1.0f, dw,
                                    false);
      } else {
        math::gpu::GemmHalfOperands(*ctx_, half, true, false, n_, k_, m_, 1.0f, dy, x, 1.0f, dw,
                                    false);
      }
    }
    if (bias_term_ && param_propagate_down(1)) {
      // db (N x 1) += dy^T (N x M) * ones (M x 1), summed in float32.
      Ones(*ctx_, m_, &ones_gpu_);
      math::gpu::GemmHalfOperands(*ctx_, half, true, false, n_, 1, m_, 1.0f, dy,
                                  ones_gpu_.gpu_half_data(half), 1.0f,
                                  blobs_[1]->mutable_gpu_diff(), false);
    }
    if (propagate_down[0]) {
      math::gpu::GemmHalfOperands(*ctx_, half, false, transpose_, m_, k_, n_, 1.0f, dy,
                                  HalfWeights(half), 0.0f, bottom[0]->mutable_gpu_half_diff(half),
                                  true);
    }
    return;
  }
  const float* dy = top[0]->gpu_diff();
  if (param_propagate_down(0)) {
    const float* x = bottom[0]->gpu_data();
    float* dw = blobs_[0]->mutable_gpu_diff();
    if (transpose_) {
      // dW (K x N) += x^T (K x M) * dy (M x N)
      math::gpu::GemmMixed(*ctx_, true, false, k_, n_, m_, 1.0f, x, dy, 1.0f, dw);
    } else {
      // dW (N x K) += dy^T (N x M) * x (M x K)
      math::gpu::GemmMixed(*ctx_, true, false, n_, k_, m_, 1.0f, dy, x, 1.0f, dw);
    }
  }
  if (bias_term_ && param_propagate_down(1)) {
    // db (N) += dy^T (N x M) * ones (M)
    math::gpu::Gemv(*ctx_, true, m_, n_, 1.0f, dy, Ones(*ctx_, m_, &ones_gpu_), 1.0f,
                    blobs_[1]->mutable_gpu_diff());
  }
  if (propagate_down[0]) {
    // dx (M x K) = dy (M x N) * W (N x K), or dy * W^T when W is stored K x N.
    math::gpu::GemmMixed(*ctx_, false, transpose_, m_, k_, n_, 1.0f, dy, blobs_[0]->gpu_data(),
                         0.0f, bottom[0]->mutable_gpu_diff());
  }
}

}  // namespace cortado
