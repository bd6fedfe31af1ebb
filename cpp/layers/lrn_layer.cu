// SPDX-License-Identifier: Apache-2.0
// LRN on the GPU. ACROSS_CHANNELS runs on cuDNN's cross-channel LRN where the build has cuDNN
// and the parameters are within its limits (local_size <= 16, k >= 1e-5, beta >= 0.01): the same
// formula, 1.8x faster forward and 3x backward than the kernels below on CaffeNet's shapes on an
// H100 (bench/gpu/cudnn_ops_bench.cpp, bench/RESULTS.md). Otherwise, with the formulas and
// summation orders of lrn_layer.cpp: ACROSS_CHANNELS has one thread per image position (n, h, w)
// slide the channel window down the channels, as the CPU code slides it over planes; WITHIN_CHANNEL
// has one thread per element sum its n x n window.
#include <memory>
#include <vector>

#include "core/cuda.hpp"
#include "layers/lrn_layer.hpp"

namespace cortado {
namespace {

struct LRNShape {
  int channels, height, width;
  int size, pre_pad;
};

// x[c]^2 at one position (x points at channel 0, channels `plane` apart); 0 outside [0, C).
__device__ float SquareAt(const float* x, int c, int channels, int plane) {
  if (c < 0 || c >= channels) return 0.0f;
  const float v = x[static_cast<int64_t>(c) * plane];
  return v * v;
}

// s = k + alpha / n * (window sum of x^2), the window entering x[c + pre_pad] and leaving
// x[c - 1 - pre_pad] at each step. Then top = s^-beta * x.
__global__ void AcrossForward(int64_t positions, const float* x, LRNShape s, float alpha_over_size,
                              float k, float beta, float* scale, float* top) {
  CORTADO_KERNEL_LOOP(i, positions) {
    const int plane = s.height * s.width;
    const int64_t offset = (i / plane) * s.channels * plane + i % plane;
    const float* in = x + offset;
    float* sc = scale + offset;
    float* out = top + offset;
    float acc = k;
    for (int c = -s.pre_pad; c < s.size - s.pre_pad; ++c) {
      acc += alpha_over_size * SquareAt(in, c, s.channels, plane);
    }
    for (int c = 0; c < s.channels; ++c) {
      if (c > 0) {
        acc += alpha_over_size * SquareAt(in, c + s.pre_pad, s.channels, plane);
        acc -= alpha_over_size * SquareAt(in, c - 1 - s.pre_pad, s.channels, plane);
      }
      const int64_t at = static_cast<int64_t>(c) * plane;
      sc[at] = acc;
      out[at] = powf(acc, -beta) * in[at];
    }
  }
}

// dy * y / s at channel c of one position; 0 outside [0, C).
__device__ float RatioAt(const float* dy, const float* y, const float* scale, int c, int channels,
                         int plane) {
  if (c < 0 || c >= channels) return 0.0f;
  const int64_t at = static_cast<int64_t>(c) * plane;
  return dy[at] * y[at] / scale[at];
}

// dx = dy * s^-beta - 2 alpha beta / n * x * (window sum of dy * y / s).
__global__ void AcrossBackward(int64_t positions, const float* x, const float* y, const float* dy,
                               const float* scale, LRNShape s, float beta, float ratio_coeff,
                               float* dx) {
  CORTADO_KERNEL_LOOP(i, positions) {
    const int plane = s.height * s.width;
    const int64_t offset = (i / plane) * s.channels * plane + i % plane;
    const float *in = x + offset, *out = y + offset, *out_diff = dy + offset;
    const float* sc = scale + offset;
    float* in_diff = dx + offset;
    float accum = 0.0f;
    for (int c = -s.pre_pad; c < s.size - 1 - s.pre_pad; ++c) {
      accum += RatioAt(out_diff, out, sc, c, s.channels, plane);
    }
    for (int c = 0; c < s.channels; ++c) {
      accum += RatioAt(out_diff, out, sc, c + s.pre_pad, s.channels, plane);
      const int64_t at = static_cast<int64_t>(c) * plane;
      float d = out_diff[at] * powf(sc[at], -beta);
      d -= ratio_coeff * (in[at] * accum);
      in_diff[at] = d;
      accum -= RatioAt(out_diff, out, sc, c - s.pre_pad, s.channels, plane);
    }
  }
}

// s = 1 + alpha * (mean of x^2 over the n x n window, zeros outside the image); top = s^-beta x.
__global__ void WithinForward(int64_t count, const float* x, LRNShape s, float alpha, float beta,
                              float* scale, float* top) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int w = static_cast<int>(i % s.width);
    const int h = static_cast<int>((i / s.width) % s.height);
    const float* plane = x + (i - (static_cast<int64_t>(h) * s.width + w));
    float sum = 0.0f;
    for (int a = h - s.pre_pad; a < h - s.pre_pad + s.size; ++a) {
      if (a < 0 || a >= s.height) continue;
      for (int b = w - s.pre_pad; b < w - s.pre_pad + s.size; ++b) {
        if (b < 0 || b >= s.width) continue;
        const float v = plane[a * s.width + b];
        sum += v * v;
      }
    }
    const float value = 1.0f + alpha * (sum / static_cast<float>(s.size * s.size));
    scale[i] = value;
    top[i] = powf(value, -beta) * x[i];
  }
}

// dx = dy * s^-beta - 2 alpha beta / n^2 * x * (window sum of dy * y / s).
__global__ void WithinBackward(int64_t count, const float* x, const float* y, const float* dy,
                               const float* scale, LRNShape s, float beta, float ratio_coeff,
                               float* dx) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int w = static_cast<int>(i % s.width);
    const int h = static_cast<int>((i / s.width) % s.height);
    const int64_t plane = i - (static_cast<int64_t>(h) * s.width + w);
    float sum = 0.0f;
    for (int a = h - s.pre_pad; a < h - s.pre_pad + s.size; ++a) {
      if (a < 0 || a >= s.height) continue;
      for (int b = w - s.pre_pad; b < w - s.pre_pad + s.size; ++b) {
        if (b < 0 || b >= s.width) continue;
        const int64_t at = plane + a * s.width + b;
        sum += dy[at] * y[at] / scale[at];
      }
    }
    float d = dy[i] * powf(scale[i], -beta);
    d -= ratio_coeff * x[i] * sum;
    dx[i] = d;
  }
}

}  // namespace

#if CORTADO_WITH_CUDNN
namespace {

// cuDNN's descriptors for one shape.
struct CudnnLrn {
  std::vector<int> shape;
  cudnnTensorDescriptor_t tensor = nullptr;
  cudnnLRNDescriptor_t lrn = nullptr;
  ~CudnnLrn() {
    if (lrn != nullptr) cudnnDestroyLRNDescriptor(lrn);
    if (tensor != nullptr) cudnnDestroyTensorDescriptor(tensor);
  }
};

bool CudnnLrnSupports(int size, float k, float beta) {
  return size >= CUDNN_LRN_MIN_N && size <= CUDNN_LRN_MAX_N && k >= CUDNN_LRN_MIN_K &&
         beta >= CUDNN_LRN_MIN_BETA;
}

}  // namespace
#endif

void LRNLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
#if CORTADO_WITH_CUDNN
  if (across_channels_ && CudnnLrnSupports(size_, k_, beta_)) {
    auto* state = static_cast<CudnnLrn*>(cudnn_.get());
    if (state == nullptr || state->shape != bottom[0]->shape()) {
      auto fresh = std::make_shared<CudnnLrn>();
      fresh->shape = bottom[0]->shape();
      CORTADO_CUDNN_CHECK(cudnnCreateTensorDescriptor(&fresh->tensor));
      CORTADO_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
          fresh->tensor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, num_, channels_, height_, width_));
      CORTADO_CUDNN_CHECK(cudnnCreateLRNDescriptor(&fresh->lrn));
      CORTADO_CUDNN_CHECK(
          cudnnSetLRNDescriptor(fresh->lrn, static_cast<unsigned>(size_), alpha_, beta_, k_));
      cudnn_ = fresh;
      state = fresh.get();
    }
    const float one = 1.0f, zero = 0.0f;
    CORTADO_CUDNN_CHECK(cudnnLRNCrossChannelForward(
        cuda::Get(*ctx_).cudnn, state->lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, state->tensor,
        bottom[0]->gpu_data(), &zero, state->tensor, top[0]->mutable_gpu_data()));
    return;
  }
#endif
  const LRNShape shape = {channels_, height_, width_, size_, pre_pad_};
  const float* x = bottom[0]->gpu_data();
  float* scale = scale_.mutable_gpu_data();
  float* y = top[0]->mutable_gpu_data();
  const cudaStream_t stream = cuda::Stream(*ctx_);
  if (across_channels_) {
    const int64_t positions = static_cast<int64_t>(num_) * height_ * width_;
    AcrossForward<<<cuda::Blocks(positions), cuda::kThreads, 0, stream>>>(
        positions, x, shape, alpha_ / size_, k_, beta_, scale, y);
  } else {
    const int64_t count = bottom[0]->count();
    WithinForward<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, x, shape, alpha_,
                                                                      beta_, scale, y);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void LRNLayer::BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
#if CORTADO_WITH_CUDNN
  if (const auto* state = static_cast<const CudnnLrn*>(cudnn_.get());
      state != nullptr && across_channels_ && CudnnLrnSupports(size_, k_, beta_)) {
    const float one = 1.0f, zero = 0.0f;
    CORTADO_CUDNN_CHECK(cudnnLRNCrossChannelBackward(
        cuda::Get(*ctx_).cudnn, state->lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, state->tensor,
        top[0]->gpu_data(), state->tensor, top[0]->gpu_diff(), state->tensor, bottom[0]->gpu_data(),
        &zero, state->tensor, bottom[0]->mutable_gpu_diff()));
    return;
  }
#endif
  const LRNShape shape = {channels_, height_, width_, size_, pre_pad_};
  const float* x = bottom[0]->gpu_data();
  const float* y = top[0]->gpu_data();
  const float* dy = top[0]->gpu_diff();
  const float* scale = scale_.gpu_data();
  float* dx = bottom[0]->mutable_gpu_diff();
  const cudaStream_t stream = cuda::Stream(*ctx_);
  if (across_channels_) {
    const int64_t positions = static_cast<int64_t>(num_) * height_ * width_;
    const float ratio_coeff = 2.0f * alpha_ * beta_ / size_;
    AcrossBackward<<<cuda::Blocks(positions), cuda::kThreads, 0, stream>>>(
        positions, x, y, dy, scale, shape, beta_, ratio_coeff, dx);
  } else {
    const int64_t count = bottom[0]->count();
    const float ratio_coeff = 2.0f * alpha_ * beta_ / static_cast<float>(size_ * size_);
    WithinBackward<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
        count, x, y, dy, scale, shape, beta_, ratio_coeff, dx);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
