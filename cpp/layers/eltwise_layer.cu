// SPDX-License-Identifier: Apache-2.0
// Eltwise on the GPU: PROD through the GPU math primitives in eltwise_layer.cpp's order; SUM in
// one pass per two bottoms, with the fused ReLU if any (and the folded Split's sum of the top's
// gradient, SumTopDiffs); MAX with one kernel per bottom that keeps
// the index of the winning bottom per element, as floats in max_mask_.
#include <cstdint>

#include "core/cuda.hpp"
#include "layers/eltwise_layer.hpp"
#include "layers/half_values.cuh"
#include "math/gpu.hpp"

namespace cortado {
namespace {

using half_values::Narrow;
using half_values::Widen;

// Bottoms 0 and 1; strict ">" so that a tie goes to bottom 1, as on the CPU.
__global__ void MaxFirst(int n, const float* a, const float* b, float* out, float* mask) {
  CORTADO_KERNEL_LOOP(i, n) {
    const bool first = a[i] > b[i];
    out[i] = first ? a[i] : b[i];
    mask[i] = first ? 0.0f : 1.0f;
  }
}

// Bottom `index` >= 2: replaces the running maximum only when strictly greater.
__global__ void MaxNext(int n, const float* x, float index, float* out, float* mask) {
  CORTADO_KERNEL_LOOP(i, n) {
    if (x[i] > out[i]) {
      out[i] = x[i];
      mask[i] = index;
    }
  }
}

// The fused ReLU of relu_layer.cu.
__device__ __forceinline__ float Relu(float x, float slope) { return x > 0.0f ? x : x * slope; }

// Two bottoms in one pass, in the CPU's order (out = c0 * a, then out += c1 * b), then the
// fused ReLU if any.
__global__ void SumTwo(int n, float c0, const float* a, float c1, const float* b, bool relu,
                       float slope, float* out) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float first = c0 * a[i];
    const float sum = c1 * b[i] + first;
    out[i] = relu ? Relu(sum, slope) : sum;
  }
}

// SumTwo and SumBackward over packs of V values of a 16-bit type (first element `first`),
// computed in float32 in the same order and rounded once.
template <typename T, int V>
__global__ void SumTwoPacks(int64_t units, int64_t first, float c0, const T* a, float c1,
                            const T* b, bool relu, float slope, T* out) {
  a += first;
  b += first;
  out += first;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < units;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const half_values::Vec<T, V> x = half_values::LoadVec<T, V>(a, q);
    const half_values::Vec<T, V> y = half_values::LoadVec<T, V>(b, q);
    half_values::Vec<T, V> r;
    for (int k = 0; k < V; ++k) {
      const float sum = c1 * Widen(y.v[k]) + c0 * Widen(x.v[k]);
      r.v[k] = Narrow<T>(relu ? Relu(sum, slope) : sum);
    }
    half_values::StoreVec<T, V>(out, q, r);
  }
}

// dy2 set: the top's gradient is dy + dy2 (EltwiseLayer::SumTopDiffs), rounded to T as the
// Split that would otherwise add them stores it.
template <typename T, int V>
__global__ void SumBackwardPacks(int64_t units, int64_t first, const T* dy, const T* dy2,
                                 const T* relu_top, float slope, float c0, T* dx0, float c1,
                                 T* dx1) {
  dy += first;
  if (dy2 != nullptr) dy2 += first;
  if (relu_top != nullptr) relu_top += first;
  if (dx0 != nullptr) dx0 += first;
  if (dx1 != nullptr) dx1 += first;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < units;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const half_values::Vec<T, V> d = half_values::LoadVec<T, V>(dy, q);
    half_values::Vec<T, V> d2{};
    if (dy2 != nullptr) d2 = half_values::LoadVec<T, V>(dy2, q);
    half_values::Vec<T, V> t{};
    if (relu_top != nullptr) t = half_values::LoadVec<T, V>(relu_top, q);
    half_values::Vec<T, V> r0, r1;
    for (int k = 0; k < V; ++k) {
      const float g =
          dy2 == nullptr ? Widen(d.v[k]) : Widen(Narrow<T>(Widen(d.v[k]) + Widen(d2.v[k])));
      const float masked = relu_top == nullptr || Widen(t.v[k]) > 0.0f ? g : g * slope;
      r0.v[k] = Narrow<T>(c0 * masked);
      r1.v[k] = Narrow<T>(c1 * masked);
    }
    if (dx0 != nullptr) half_values::StoreVec<T, V>(dx0, q, r0);
    if (dx1 != nullptr) half_values::StoreVec<T, V>(dx1, q, r1);
  }
}

__global__ void ReluInPlace(int n, float slope, float* x) {
  CORTADO_KERNEL_LOOP(i, n) x[i] = Relu(x[i], slope);
}

// The gradients of a SUM for up to two bottoms at once (a null dx is skipped): dx = c * g with
// g the top's gradient (dy, or dy + dy2: EltwiseLayer::SumTopDiffs), masked by the sign of the
// top when a ReLU is fused (relu_top set).
__global__ void SumBackward(int n, const float* dy, const float* dy2, const float* relu_top,
                            float slope, float c0, float* dx0, float c1, float* dx1) {
  CORTADO_KERNEL_LOOP(i, n) {
    const float d = dy2 == nullptr ? dy[i] : dy[i] + dy2[i];
    const float g = relu_top == nullptr || relu_top[i] > 0.0f ? d : d * slope;
    if (dx0 != nullptr) dx0[i] = c0 * g;
    if (dx1 != nullptr) dx1[i] = c1 * g;
  }
}

__global__ void MaxBackward(int n, const float* top_diff, const float* mask, float index,
                            float* diff) {
  CORTADO_KERNEL_LOOP(i, n) diff[i] = mask[i] == index ? top_diff[i] : 0.0f;
}

}  // namespace

void EltwiseLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  Context& ctx = *ctx_;
  if (const HalfType half = HalfTensors(); half != HalfType::kNone) {  // a SUM of two
    const int n = top[0]->count();
    half_values::WithValueType(half, [&](auto tag) {
      using T = decltype(tag);
      const T* a = half_values::Data<T>(*bottom[0], half);
      const T* b = half_values::Data<T>(*bottom[1], half);
      T* out = half_values::MutableData<T>(*top[0], half);
      const bool aligned = half_values::PackAligned<T>(a) && half_values::PackAligned<T>(b) &&
                           half_values::PackAligned<T>(out);
      half_values::InPacksOfFour(n, aligned, [&](auto v, int64_t units, int64_t first) {
        SumTwoPacks<T, decltype(v)::value>
            <<<half_values::PackBlocks(units), cuda::kThreads, 0, cuda::Stream(ctx)>>>(
                units, first, coeffs_[0], a, coeffs_[1], b, relu_, relu_slope_, out);
        CORTADO_CUDA_CHECK_LAUNCH();
      });
    });
    return;
  }
  const int n = top[0]->count();
  float* out = top[0]->mutable_gpu_data();
  const int num_bottom = static_cast<int>(bottom.size());
  switch (op_) {
    case caffe::EltwiseParameter::PROD:
      math::gpu::Mul(ctx, n, bottom[0]->gpu_data(), bottom[1]->gpu_data(), out);
      for (int b = 2; b < num_bottom; ++b) math::gpu::Mul(ctx, n, out, bottom[b]->gpu_data(), out);
      break;
    case caffe::EltwiseParameter::SUM:
      if (num_bottom == 2) {  // one pass instead of three (the residual sums of a ResNet)
        SumTwo<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(ctx)>>>(
            n, coeffs_[0], bottom[0]->gpu_data(), coeffs_[1], bottom[1]->gpu_data(), relu_,
            relu_slope_, out);
        CORTADO_CUDA_CHECK_LAUNCH();
        break;
      }
      math::gpu::Set(ctx, n, 0.0f, out);
      for (int b = 0; b < num_bottom; ++b) {
        math::gpu::Axpy(ctx, n, coeffs_[b], bottom[b]->gpu_data(), out);
      }
      if (relu_) {
        ReluInPlace<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(ctx)>>>(n, relu_slope_, out);
        CORTADO_CUDA_CHECK_LAUNCH();
      }
      break;
    case caffe::EltwiseParameter::MAX: {
      float* mask = max_mask_.mutable_gpu_data();
      cudaStream_t stream = cuda::Stream(ctx);
      MaxFirst<<<cuda::Blocks(n), cuda::kThreads, 0, stream>>>(n, bottom[0]->gpu_data(),
                                                               bottom[1]->gpu_data(), out, mask);
      CORTADO_CUDA_CHECK_LAUNCH();
      for (int b = 2; b < num_bottom; ++b) {
        MaxNext<<<cuda::Blocks(n), cuda::kThreads, 0, stream>>>(n, bottom[b]->gpu_data(),
                                                                static_cast<float>(b), out, mask);
        CORTADO_CUDA_CHECK_LAUNCH();
      }
      break;
    }
    default:
      CORTADO_THROW(kInvalidArgument, "{}: unknown eltwise operation {}", Describe(),
                    static_cast<int>(op_));
  }
}

void EltwiseLayer::BackwardGpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  Context& ctx = *ctx_;
  const int n = top[0]->count();
  if (const HalfType half = HalfTensors(); half != HalfType::kNone) {  // a SUM of two
    half_values::WithValueType(half, [&](auto tag) {
      using T = decltype(tag);
      T* dx0 = propagate_down[0] ? half_values::MutableDiff<T>(*bottom[0], half) : nullptr;
      T* dx1 = propagate_down[1] ? half_values::MutableDiff<T>(*bottom[1], half) : nullptr;
      if (dx0 == nullptr && dx1 == nullptr) return;
      const T* relu_top = relu_ ? half_values::Data<T>(*top[0], half) : nullptr;
      const T* dy = half_values::Diff<T>(sums_top_diffs() ? *top_diff_terms_[0] : *top[0], half);
      const T* dy2 = sums_top_diffs() ? half_values::Diff<T>(*top_diff_terms_[1], half) : nullptr;
      const bool aligned = half_values::PackAligned<T>(dy) && half_values::PackAligned<T>(dy2) &&
                           half_values::PackAligned<T>(relu_top) &&
                           half_values::PackAligned<T>(dx0) && half_values::PackAligned<T>(dx1);
      half_values::InPacksOfFour(n, aligned, [&](auto v, int64_t units, int64_t first) {
        SumBackwardPacks<T, decltype(v)::value>
            <<<half_values::PackBlocks(units), cuda::kThreads, 0, cuda::Stream(ctx)>>>(
                units, first, dy, dy2, relu_top, relu_slope_, coeffs_[0], dx0, coeffs_[1], dx1);
        CORTADO_CUDA_CHECK_LAUNCH();
      });
    });
    return;
  }
  const int num_bottom = static_cast<int>(bottom.size());
  if (op_ == caffe::EltwiseParameter::SUM) {  // one pass per two bottoms
    const float* relu_top = relu_ ? top[0]->gpu_data() : nullptr;
    const float* dy = sums_top_diffs() ? top_diff_terms_[0]->gpu_diff() : top[0]->gpu_diff();
    const float* dy2 = sums_top_diffs() ? top_diff_terms_[1]->gpu_diff() : nullptr;
    for (int b = 0; b < num_bottom; b += 2) {
      float* dx0 = propagate_down[b] ? bottom[b]->mutable_gpu_diff() : nullptr;
      const bool second = b + 1 < num_bottom && propagate_down[b + 1];
      float* dx1 = second ? bottom[b + 1]->mutable_gpu_diff() : nullptr;
      if (dx0 == nullptr && dx1 == nullptr) continue;
      SumBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(ctx)>>>(
          n, dy, dy2, relu_top, relu_slope_, coeffs_[b], dx0, second ? coeffs_[b + 1] : 0.0f, dx1);
      CORTADO_CUDA_CHECK_LAUNCH();
    }
    return;
  }
  const float* top_diff = top[0]->gpu_diff();
  for (int b = 0; b < num_bottom; ++b) {
    if (!propagate_down[b]) continue;
    float* diff = bottom[b]->mutable_gpu_diff();
    switch (op_) {
      case caffe::EltwiseParameter::PROD:
        if (stable_prod_grad_) {
          // Product of all the other bottoms.
          bool started = false;
          for (int j = 0; j < num_bottom; ++j) {
            if (j == b) continue;
            if (!started) {
              math::gpu::Copy(ctx, n, bottom[j]->gpu_data(), diff);
              started = true;
            } else {
              math::gpu::Mul(ctx, n, diff, bottom[j]->gpu_data(), diff);
            }
          }
        } else {
          math::gpu::Div(ctx, n, top[0]->gpu_data(), bottom[b]->gpu_data(), diff);
        }
        math::gpu::Mul(ctx, n, diff, top_diff, diff);
        break;
      case caffe::EltwiseParameter::MAX:
        MaxBackward<<<cuda::Blocks(n), cuda::kThreads, 0, cuda::Stream(ctx)>>>(
            n, top_diff, max_mask_.gpu_data(), static_cast<float>(b), diff);
        CORTADO_CUDA_CHECK_LAUNCH();
        break;
      default:
        break;
    }
  }
}

}  // namespace cortado
