// SPDX-License-Identifier: Apache-2.0
// Eltwise on the GPU: the same sequence of element-wise steps as eltwise_layer.cpp (PROD and
// SUM through the GPU math primitives, MAX with one kernel per bottom that keeps the index of
// the winning bottom per element, as floats in max_mask_).
#include "core/cuda.hpp"
#include "layers/eltwise_layer.hpp"
#include "math/gpu.hpp"

namespace cortado {
namespace {

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

__global__ void MaxBackward(int n, const float* top_diff, const float* mask, float index,
                            float* diff) {
  CORTADO_KERNEL_LOOP(i, n) diff[i] = mask[i] == index ? top_diff[i] : 0.0f;
}

}  // namespace

void EltwiseLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  Context& ctx = *ctx_;
  const int n = top[0]->count();
  float* out = top[0]->mutable_gpu_data();
  const int num_bottom = static_cast<int>(bottom.size());
  switch (op_) {
    case caffe::EltwiseParameter::PROD:
      math::gpu::Mul(ctx, n, bottom[0]->gpu_data(), bottom[1]->gpu_data(), out);
      for (int b = 2; b < num_bottom; ++b) math::gpu::Mul(ctx, n, out, bottom[b]->gpu_data(), out);
      break;
    case caffe::EltwiseParameter::SUM:
      math::gpu::Set(ctx, n, 0.0f, out);
      for (int b = 0; b < num_bottom; ++b) {
        math::gpu::Axpy(ctx, n, coeffs_[b], bottom[b]->gpu_data(), out);
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
  const float* top_diff = top[0]->gpu_diff();
  const int num_bottom = static_cast<int>(bottom.size());
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
      case caffe::EltwiseParameter::SUM:
        math::gpu::Scale(ctx, n, coeffs_[b], top_diff, diff);
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
