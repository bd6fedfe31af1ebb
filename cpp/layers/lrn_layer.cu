// SPDX-License-Identifier: Apache-2.0
// LRN on the GPU. ACROSS_CHANNELS runs on cuDNN's cross-channel LRN where the build has cuDNN
// and the parameters are within its limits (local_size <= 16, k >= 1e-5, beta >= 0.01): the same
// formula, 1.8x faster forward and 3x backward than the kernels below on CaffeNet's shapes on an
// H100 (bench/gpu/cudnn_ops_bench.cpp, bench/RESULTS.md). Otherwise, with the formulas and
// summation orders of lrn_layer.cpp: ACROSS_CHANNELS has one thread per image position (n, h, w)
// slide the channel window down the channels, as the CPU code slides it over planes; WITHIN_CHANNEL
// has one thread per element sum its n x n window. On half tensors (Layer::HalfTensors) those
// kernels read and write the 16-bit type, s included (kept for Backward in it, half the memory),
// with the arithmetic in float32.
#include <memory>
#include <vector>

#include "core/cuda.hpp"
#include "layers/half_values.cuh"
#include "layers/lrn_layer.hpp"

namespace cortado {
namespace {

using half_values::Narrow;
using half_values::Widen;

struct LRNShape {
  int channels, height, width;
  int size, pre_pad;
};

// x[c]^2 at one position (x points at channel 0, channels `plane` apart); 0 outside [0, C).
template <typename T>
__device__ float SquareAt(const T* x, int c, int channels, int plane) {
  if (c < 0 || c >= channels) return 0.0f;
  const float v = Widen(x[static_cast<int64_t>(c) * plane]);
  return v * v;
}

// s = k + alpha / n * (window sum of x^2), the window entering x[c + pre_pad] and leaving
// x[c - 1 - pre_pad] at each step. Then top = s^-beta * x.
template <typename T>
__global__ void AcrossForward(int64_t positions, const T* x, LRNShape s, float alpha_over_size,
                              float k, float beta, T* scale, T* top) {
  CORTADO_KERNEL_LOOP(i, positions) {
    const int plane = s.height * s.width;
    const int64_t offset = (i / plane) * s.channels * plane + i % plane;
    const T* in = x + offset;
    T* sc = scale + offset;
    T* out = top + offset;
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
      sc[at] = Narrow<T>(acc);
      out[at] = Narrow<T>(powf(acc, -beta) * Widen(in[at]));
    }
  }
}

// dy * y / s at channel c of one position; 0 outside [0, C).
template <typename T>
__device__ float RatioAt(const T* dy, const T* y, const T* scale, int c, int channels, int plane) {
  if (c < 0 || c >= channels) return 0.0f;
  const int64_t at = static_cast<int64_t>(c) * plane;
  return Widen(dy[at]) * Widen(y[at]) / Widen(scale[at]);
}

// dx = dy * s^-beta - 2 alpha beta / n * x * (window sum of dy * y / s).
template <typename T>
__global__ void AcrossBackward(int64_t positions, const T* x, const T* y, const T* dy,
                               const T* scale, LRNShape s, float beta, float ratio_coeff, T* dx) {
  CORTADO_KERNEL_LOOP(i, positions) {
    const int plane = s.height * s.width;
    const int64_t offset = (i / plane) * s.channels * plane + i % plane;
    const T *in = x + offset, *out = y + offset, *out_diff = dy + offset;
    const T* sc = scale + offset;
    T* in_diff = dx + offset;
    float accum = 0.0f;
    for (int c = -s.pre_pad; c < s.size - 1 - s.pre_pad; ++c) {
      accum += RatioAt(out_diff, out, sc, c, s.channels, plane);
    }
    for (int c = 0; c < s.channels; ++c) {
      accum += RatioAt(out_diff, out, sc, c + s.pre_pad, s.channels, plane);
      const int64_t at = static_cast<int64_t>(c) * plane;
      float d = Widen(out_diff[at]) * powf(Widen(sc[at]), -beta);
      d -= ratio_coeff * (Widen(in[at]) * accum);
      in_diff[at] = Narrow<T>(d);
      accum -= RatioAt(out_diff, out, sc, c - s.pre_pad, s.channels, plane);
    }
  }
}

// s = 1 + alpha * (mean of x^2 over the n x n window, zeros outside the image); top = s^-beta x.
template <typename T>
__global__ void WithinForward(int64_t count, const T* x, LRNShape s, float alpha, float beta,
                              T* scale, T* top) {
  CORTADO_KERNEL_LOOP(i, count) {
    const int w = static_cast<int>(i % s.width);
    const int h = static_cast<int>((i / s.width) % s.height);
    const T* plane = x + (i - (static_cast<int64_t>(h) * s.width + w));
    float sum = 0.0f;
    for (int a = h - s.pre_pad; a < h - s.pre_pad + s.size; ++a) {
      if (a < 0 || a >= s.height) continue;
      for (int b = w - s.pre_pad; b < w - s.pre_pad + s.size; ++b) {
        if (b < 0 || b >= s.width) continue;
        const float v = Widen(plane[a * s.width + b]);
        sum += v * v;
      }
    }
    const float value = 1.0f + alpha * (sum / static_cast<float>(s.size * s.size));
    scale[i] = Narrow<T>(value);
    top[i] = Narrow<T>(powf(value, -beta) * Widen(x[i]));
  }
}

// dx = dy * s^-beta - 2 alpha beta / n^2 * x * (window sum of dy * y / s).
template <typename T>
__global__ void WithinBackward(int64_t count, const T* x, const T* y, const T* dy, const T* scale,
                               LRNShape s, float beta, float ratio_coeff, T* dx) {
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
        sum += Widen(dy[at]) * Widen(y[at]) / Widen(scale[at]);
      }
    }
    float d = Widen(dy[i]) * powf(Widen(scale[i]), -beta);
    d -= ratio_coeff * Widen(x[i]) * sum;
    dx[i] = Narrow<T>(d);
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
  const HalfType half = HalfTensors();
#if CORTADO_WITH_CUDNN
  if (across_channels_ && CudnnLrnSupports(size_, k_, beta_) && half == HalfType::kNone) {
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
  if (scale_.home_type() != half) {
    // A buffer of the type's bytes (the float32 one Reshape made is then never allocated).
    scale_.set_home_type(half);
    scale_.UseDataBuffer(std::make_shared<SyncedMemory>(
        ValueBytes(half) * static_cast<size_t>(scale_.count()), ctx_->device().id));
  }
  half_values::WithValueType(half, [&](auto tag) {
    using T = decltype(tag);
    const T* x = half_values::Data<T>(*bottom[0], half);
    T* scale = half_values::MutableData<T>(scale_, half);
    T* y = half_values::MutableData<T>(*top[0], half);
    const cudaStream_t stream = cuda::Stream(*ctx_);
    if (across_channels_) {
      const int64_t positions = static_cast<int64_t>(num_) * height_ * width_;
      AcrossForward<T><<<cuda::Blocks(positions), cuda::kThreads, 0, stream>>>(
          positions, x, shape, alpha_ / size_, k_, beta_, scale, y);
    } else {
      const int64_t count = bottom[0]->count();
      WithinForward<T><<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, x, shape, alpha_,
                                                                           beta_, scale, y);
    }
    CORTADO_CUDA_CHECK_LAUNCH();
  });
}

void LRNLayer::BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const HalfType half = HalfTensors();
#if CORTADO_WITH_CUDNN
  if (const auto* state = static_cast<const CudnnLrn*>(cudnn_.get());
      state != nullptr && across_channels_ && CudnnLrnSupports(size_, k_, beta_) &&
      half == HalfType::kNone) {
    const float one = 1.0f, zero = 0.0f;
    CORTADO_CUDNN_CHECK(cudnnLRNCrossChannelBackward(
        cuda::Get(*ctx_).cudnn, state->lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, state->tensor,
        top[0]->gpu_data(), state->tensor, top[0]->gpu_diff(), state->tensor, bottom[0]->gpu_data(),
        &zero, state->tensor, bottom[0]->mutable_gpu_diff()));
    return;
  }
#endif
  const LRNShape shape = {channels_, height_, width_, size_, pre_pad_};
  half_values::WithValueType(half, [&](auto tag) {
    using T = decltype(tag);
    const T* x = half_values::Data<T>(*bottom[0], half);
    const T* y = half_values::Data<T>(*top[0], half);
    const T* dy = half_values::Diff<T>(*top[0], half);
    const T* scale = half_values::Data<T>(scale_, half);
    T* dx = half_values::MutableDiff<T>(*bottom[0], half);
    const cudaStream_t stream = cuda::Stream(*ctx_);
    if (across_channels_) {
      const int64_t positions = static_cast<int64_t>(num_) * height_ * width_;
      const float ratio_coeff = 2.0f * alpha_ * beta_ / size_;
      AcrossBackward<T><<<cuda::Blocks(positions), cuda::kThreads, 0, stream>>>(
          positions, x, y, dy, scale, shape, beta_, ratio_coeff, dx);
    } else {
      const int64_t count = bottom[0]->count();
      const float ratio_coeff = 2.0f * alpha_ * beta_ / static_cast<float>(size_ * size_);
      WithinBackward<T><<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
          count, x, y, dy, scale, shape, beta_, ratio_coeff, dx);
    }
    CORTADO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace cortado
