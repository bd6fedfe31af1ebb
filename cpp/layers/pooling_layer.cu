// SPDX-License-Identifier: Apache-2.0
// Pooling on the GPU: the windows of pooling_layer.cpp, one thread per output in Forward and
// one per input in Backward, which gathers over the output windows that cover its element
// (no atomics, and the terms are added in the CPU code's order). STOCHASTIC is GPU-only.
// 16-bit bottoms and tops may each be channels-last (Tensor::home_nhwc): threads then count
// in that order, so a warp reads and writes neighbouring channels.
#include <cfloat>
#include <climits>
#include <cstdint>

#include "core/cuda.hpp"
#include "layers/half_values.cuh"
#include "layers/pooling_layer.hpp"
#include "math/cuda/reduce_helpers.cuh"
#include "math/gpu.hpp"

namespace cortado {
namespace {

using half_values::Narrow;
using half_values::Widen;

struct PoolShape {
  int height, width, pooled_h, pooled_w;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  // Division by the sizes the index arithmetic divides by, as a multiply and a shift: an integer
  // division takes tens of instructions, and with several per element Backward was bound by
  // them rather than by memory (valid below 2^31, which Locate and Covering check).
  cuda::FastDiv by_width, by_plane, by_pooled_w, by_pooled_plane, by_stride_h, by_stride_w;
  // Channels-last tensors (Tensor::home_nhwc; 16-bit passes): the bottom's and the top's
  // layouts, each either. The kernels then count threads in the memory order of what they
  // write, and address the other tensor in its own layout.
  int channels;
  bool in_nhwc, out_nhwc;
  cuda::FastDiv by_channels;
};

PoolShape MakeShape(int channels, int height, int width, int pooled_h, int pooled_w, int kernel_h,
                    int kernel_w, int stride_h, int stride_w, int pad_h, int pad_w, bool in_nhwc,
                    bool out_nhwc) {
  auto div = [](int d) { return cuda::FastDiv(static_cast<uint32_t>(d > 0 ? d : 1)); };
  return {height,        width,
          pooled_h,      pooled_w,
          kernel_h,      kernel_w,
          stride_h,      stride_w,
          pad_h,         pad_w,
          div(width),    div(height * width),
          div(pooled_w), div(pooled_h * pooled_w),
          div(stride_h), div(stride_w),
          channels,      in_nhwc,
          out_nhwc,      div(channels)};
}

// The output row / column range [begin, end) whose windows cover input row / column x.
__device__ int FirstCovering(int x, int pad, int kernel, const cuda::FastDiv& stride) {
  return x + pad < kernel ? 0 : static_cast<int>(stride.Div(x + pad - kernel)) + 1;
}
__device__ int EndCovering(int x, int pad, const cuda::FastDiv& stride, int pooled) {
  return min(static_cast<int>(stride.Div(x + pad)) + 1, pooled);
}

// Where the values of one channel of one image lie: at base + position * step (position h * W
// + w; step 1 in NCHW, the channel count in NHWC).
struct Plane {
  int64_t base;
  int step;
};
__device__ __forceinline__ Plane PlaneOf(int64_t image, int channel, int channels, int plane_size,
                                         bool nhwc) {
  return nhwc ? Plane{image * channels * plane_size + channel, channels}
              : Plane{(image * channels + channel) * plane_size, 1};
}

// i / d for i >= 0 (the fast division below 2^31).
__device__ __forceinline__ int64_t Quotient(int64_t i, const cuda::FastDiv& d) {
  return i <= INT_MAX ? d.Div(static_cast<uint32_t>(i)) : i / d.divisor;
}

// Element i of a [images][channels][plane] tensor (nhwc: [images][plane][channels]), by_plane
// dividing by the plane's size: its image, channel and position in the plane.
struct Element {
  int64_t image;
  int channel, position;
};
__device__ Element ElementAt(int64_t i, int channels, const cuda::FastDiv& by_channels,
                             const cuda::FastDiv& by_plane, bool nhwc) {
  const int plane_size = static_cast<int>(by_plane.divisor);
  Element e;
  if (nhwc) {
    const int64_t pixel = Quotient(i, by_channels);  // image * plane_size + position
    e.channel = static_cast<int>(i - pixel * channels);
    e.image = Quotient(pixel, by_plane);
    e.position = static_cast<int>(pixel - e.image * plane_size);
  } else {
    const int64_t plane = Quotient(i, by_plane);
    e.position = static_cast<int>(i - plane * plane_size);
    e.image = channels == 1 ? plane : Quotient(plane, by_channels);
    e.channel = static_cast<int>(plane - e.image * channels);
  }
  return e;
}

// Output i (counted in the top's memory order): its position, and where its channel's values lie in
// the bottom and in the top.
struct OutputPosition {
  int ph, pw;
  Plane in, out;
};
__device__ OutputPosition Locate(int64_t i, const PoolShape& s) {
  const Element e = ElementAt(i, s.channels, s.by_channels, s.by_pooled_plane, s.out_nhwc);
  const int ph = static_cast<int>(s.by_pooled_w.Div(e.position));
  return {ph, e.position - ph * s.pooled_w,
          PlaneOf(e.image, e.channel, s.channels, s.height * s.width, s.in_nhwc),
          PlaneOf(e.image, e.channel, s.channels, s.pooled_h * s.pooled_w, s.out_nhwc)};
}

// AVE's divisor: the window clipped to the padded bounds [-pad, size + pad).
__device__ int AveDivisor(int ph, int pw, const PoolShape& s) {
  const int hstart = ph * s.stride_h - s.pad_h;
  const int wstart = pw * s.stride_w - s.pad_w;
  const int hend = min(hstart + s.kernel_h, s.height + s.pad_h);
  const int wend = min(wstart + s.kernel_w, s.width + s.pad_w);
  return (hend - hstart) * (wend - wstart);
}

// The first maximum wins on ties (strict >); an empty window gives 0 and index -1. Each output's
// choice goes to `index` (h * W + w, as float: Caffe's mask top) or, when `offsets` is given, to
// one byte: the place in the unclipped window, (h - hstart) * kernel_w + (w - wstart), or
// kNoOffset for an empty window (a quarter of the memory, for windows of at most 255 values).
constexpr uint8_t kNoOffset = 255;
template <typename T>
__global__ void MaxForward(int64_t count, const T* x, PoolShape s, T* top, float* index,
                           uint8_t* offsets) {
  CORTADO_KERNEL_LOOP(i, count) {
    const OutputPosition o = Locate(i, s);
    const T* src = x + o.in.base;
    const int hfirst = o.ph * s.stride_h - s.pad_h;
    const int wfirst = o.pw * s.stride_w - s.pad_w;
    const int hstart = max(hfirst, 0);
    const int wstart = max(wfirst, 0);
    const int hend = min(hfirst + s.kernel_h, s.height);
    const int wend = min(wfirst + s.kernel_w, s.width);
    float best = -FLT_MAX;
    int best_index = -1, best_h = 0, best_w = 0;
    for (int h = hstart; h < hend; ++h) {
      for (int w = wstart; w < wend; ++w) {
        const int at = h * s.width + w;
        const float v = Widen(src[static_cast<int64_t>(at) * o.in.step]);
        if (v > best) {
          best = v;
          best_index = at;
          best_h = h;
          best_w = w;
        }
      }
    }
    top[i] = Narrow<T>(best_index < 0 ? 0.0f : best);
    if (offsets != nullptr) {
      offsets[i] = best_index < 0
                       ? kNoOffset
                       : static_cast<uint8_t>((best_h - hfirst) * s.kernel_w + (best_w - wfirst));
    } else {
      index[i] = static_cast<float>(best_index);
    }
  }
}

template <typename T>
__global__ void AveForward(int64_t count, const T* x, PoolShape s, T* top) {
  CORTADO_KERNEL_LOOP(i, count) {
    const OutputPosition o = Locate(i, s);
    const T* src = x + o.in.base;
    const int pool_size = AveDivisor(o.ph, o.pw, s);
    const int hstart = max(o.ph * s.stride_h - s.pad_h, 0);
    const int wstart = max(o.pw * s.stride_w - s.pad_w, 0);
    const int hend = min(o.ph * s.stride_h - s.pad_h + s.kernel_h, s.height);
    const int wend = min(o.pw * s.stride_w - s.pad_w + s.kernel_w, s.width);
    float sum = 0.0f;
    for (int h = hstart; h < hend; ++h) {
      for (int w = wstart; w < wend; ++w) {
        sum += Widen(src[static_cast<int64_t>(h * s.width + w) * o.in.step]);
      }
    }
    top[i] = Narrow<T>(pool_size > 0 ? sum / pool_size : 0.0f);
  }
}

// STOCHASTIC windows have no padding (Setup refuses it).
__device__ void StochasticWindow(const OutputPosition& o, const PoolShape& s, int* hstart,
                                 int* hend, int* wstart, int* wend) {
  *hstart = o.ph * s.stride_h;
  *wstart = o.pw * s.stride_w;
  *hend = min(*hstart + s.kernel_h, s.height);
  *wend = min(*wstart + s.kernel_w, s.width);
}

// Caffe's draw: the first element whose running sum reaches u * (window sum), u uniform in
// [0, 1) read from `index`, which then receives the drawn element's index. When none does
// (only possible with negative inputs) the output is 0 and the index -1.
__global__ void StochasticForwardTrain(int64_t count, const float* x, PoolShape s, float* top,
                                       float* index) {
  CORTADO_KERNEL_LOOP(i, count) {
    const OutputPosition o = Locate(i, s);
    const float* src = x + o.in.base;
    int hstart, hend, wstart, wend;
    StochasticWindow(o, s, &hstart, &hend, &wstart, &wend);
    float sum = 0.0f;
    for (int h = hstart; h < hend; ++h) {
      for (int w = wstart; w < wend; ++w) sum += src[h * s.width + w];
    }
    const float threshold = index[i] * sum;
    float value = 0.0f;
    int chosen = -1;
    sum = 0.0f;
    for (int h = hstart; h < hend && chosen < 0; ++h) {
      for (int w = wstart; w < wend; ++w) {
        sum += src[h * s.width + w];
        if (sum >= threshold) {
          chosen = h * s.width + w;
          value = src[chosen];
          break;
        }
      }
    }
    top[i] = value;
    index[i] = static_cast<float>(chosen);
  }
}

// sum(x^2) / (FLT_MIN + sum(x)) over the window, as Caffe (FLT_MIN keeps 0 / 0 away).
__global__ void StochasticForwardTest(int64_t count, const float* x, PoolShape s, float* top) {
  CORTADO_KERNEL_LOOP(i, count) {
    const OutputPosition o = Locate(i, s);
    const float* src = x + o.in.base;
    int hstart, hend, wstart, wend;
    StochasticWindow(o, s, &hstart, &hend, &wstart, &wend);
    float sum = FLT_MIN;
    float squares = 0.0f;
    for (int h = hstart; h < hend; ++h) {
      for (int w = wstart; w < wend; ++w) {
        const float v = src[h * s.width + w];
        sum += v;
        squares += v * v;
      }
    }
    top[i] = squares / sum;
  }
}

// Input i (counted in the bottom's memory order): its position, where its channel's
// values lie in the bottom and in the top, and the range of outputs whose windows cover it.
struct InputPosition {
  int h, w, ph_begin, ph_end, pw_begin, pw_end;
  Plane in, out;
};
__device__ InputPosition Covering(int64_t i, const PoolShape& s) {
  InputPosition p;
  const Element e = ElementAt(i, s.channels, s.by_channels, s.by_plane, s.in_nhwc);
  p.h = static_cast<int>(s.by_width.Div(e.position));
  p.w = e.position - p.h * s.width;
  p.in = PlaneOf(e.image, e.channel, s.channels, s.height * s.width, s.in_nhwc);
  p.out = PlaneOf(e.image, e.channel, s.channels, s.pooled_h * s.pooled_w, s.out_nhwc);
  p.ph_begin = FirstCovering(p.h, s.pad_h, s.kernel_h, s.by_stride_h);
  p.ph_end = EndCovering(p.h, s.pad_h, s.by_stride_h, s.pooled_h);
  p.pw_begin = FirstCovering(p.w, s.pad_w, s.kernel_w, s.by_stride_w);
  p.pw_end = EndCovering(p.w, s.pad_w, s.by_stride_w, s.pooled_w);
  return p;
}

// MAX, and STOCHASTIC in TRAIN: the top diffs of the windows whose recorded index is this
// element.
template <typename T>
__global__ void IndexBackward(int64_t count, const T* top_diff, const float* index, PoolShape s,
                              T* bottom_diff) {
  CORTADO_KERNEL_LOOP(i, count) {
    const InputPosition p = Covering(i, s);
    const int self = p.h * s.width + p.w;
    float gradient = 0.0f;
    for (int ph = p.ph_begin; ph < p.ph_end; ++ph) {
      for (int pw = p.pw_begin; pw < p.pw_end; ++pw) {
        const int64_t out = p.out.base + static_cast<int64_t>(ph * s.pooled_w + pw) * p.out.step;
        if (static_cast<int>(index[out]) == self) gradient += Widen(top_diff[out]);
      }
    }
    bottom_diff[i] = Narrow<T>(gradient);
  }
}

// MAX with byte offsets (MaxForward): the same sums as IndexBackward, in the same order.
template <typename T>
__global__ void OffsetBackward(int64_t count, const T* top_diff, const uint8_t* offsets,
                               PoolShape s, T* bottom_diff) {
  CORTADO_KERNEL_LOOP(i, count) {
    const InputPosition p = Covering(i, s);
    float gradient = 0.0f;
    for (int ph = p.ph_begin; ph < p.ph_end; ++ph) {
      const int row = (p.h - (ph * s.stride_h - s.pad_h)) * s.kernel_w;
      for (int pw = p.pw_begin; pw < p.pw_end; ++pw) {
        const int64_t out = p.out.base + static_cast<int64_t>(ph * s.pooled_w + pw) * p.out.step;
        if (offsets[out] == row + (p.w - (pw * s.stride_w - s.pad_w))) {
          gradient += Widen(top_diff[out]);
        }
      }
    }
    bottom_diff[i] = Narrow<T>(gradient);
  }
}

template <typename T>
__global__ void AveBackward(int64_t count, const T* top_diff, PoolShape s, T* bottom_diff) {
  CORTADO_KERNEL_LOOP(i, count) {
    const InputPosition p = Covering(i, s);
    float gradient = 0.0f;
    for (int ph = p.ph_begin; ph < p.ph_end; ++ph) {
      for (int pw = p.pw_begin; pw < p.pw_end; ++pw) {
        const int64_t out = p.out.base + static_cast<int64_t>(ph * s.pooled_w + pw) * p.out.step;
        gradient += Widen(top_diff[out]) / AveDivisor(ph, pw, s);
      }
    }
    bottom_diff[i] = Narrow<T>(gradient);
  }
}

// STOCHASTIC in TEST: y = Q / S with S = FLT_MIN + sum(x), Q = sum(x^2), so
// dy/dx = (2 x - y) / S for every x of the window.
__global__ void StochasticBackwardTest(int64_t count, const float* x, const float* top,
                                       const float* top_diff, PoolShape s, float* bottom_diff) {
  CORTADO_KERNEL_LOOP(i, count) {
    const InputPosition p = Covering(i, s);
    const float* src = x + p.in.base;
    const int64_t out_plane = p.out.base;
    const float self = src[p.h * s.width + p.w];
    float gradient = 0.0f;
    for (int ph = p.ph_begin; ph < p.ph_end; ++ph) {
      for (int pw = p.pw_begin; pw < p.pw_end; ++pw) {
        int hstart, hend, wstart, wend;
        StochasticWindow({ph, pw, p.in, p.out}, s, &hstart, &hend, &wstart, &wend);
        float sum = FLT_MIN;
        for (int h = hstart; h < hend; ++h) {
          for (int w = wstart; w < wend; ++w) sum += src[h * s.width + w];
        }
        const int64_t out = out_plane + ph * s.pooled_w + pw;
        gradient += top_diff[out] * (2.0f * self - top[out]) / sum;
      }
    }
    bottom_diff[i] = gradient;
  }
}

}  // namespace

void PoolingLayer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  // Channels-last applies to the 16-bit passes only: the float32 ones read NCHW views.
  const bool half = HalfTensors() != HalfType::kNone;
  const PoolShape shape = MakeShape(channels_, height_, width_, pooled_h_, pooled_w_, kernel_h_,
                                    kernel_w_, stride_h_, stride_w_, pad_h_, pad_w_,
                                    half && bottom[0]->home_nhwc(), half && top[0]->home_nhwc());
  const int64_t count = top[0]->count();
  const cudaStream_t stream = cuda::Stream(*ctx_);
  if (const HalfType half = HalfTensors(); half != HalfType::kNone) {  // MAX or AVE, one top
    half_values::WithValueType(half, [&](auto tag) {
      using T = decltype(tag);
      const T* x = half_values::Data<T>(*bottom[0], half);
      T* y = half_values::MutableData<T>(*top[0], half);
      if (pool_ == caffe::PoolingParameter::MAX) {
        float* index = nullptr;
        uint8_t* offsets = nullptr;
        if (MaxOffsetsFit()) {
          gpu_index_.Reshape({static_cast<int>((count + 3) / 4)});
          offsets = reinterpret_cast<uint8_t*>(gpu_index_.mutable_gpu_data());
        } else {
          gpu_index_.ReshapeLike(*top[0]);
          index = gpu_index_.mutable_gpu_data();
        }
        MaxForward<T><<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, x, shape, y, index,
                                                                          offsets);
      } else {
        AveForward<T><<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, x, shape, y);
      }
      CORTADO_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  const float* x = bottom[0]->gpu_data();
  float* y = top[0]->mutable_gpu_data();
  if (pool_ == caffe::PoolingParameter::MAX) {
    float* index = nullptr;
    uint8_t* offsets = nullptr;
    if (top.size() > 1) {
      index = top[1]->mutable_gpu_data();
    } else if (MaxOffsetsFit()) {
      gpu_index_.Reshape({static_cast<int>((count + 3) / 4)});  // one byte per output
      offsets = reinterpret_cast<uint8_t*>(gpu_index_.mutable_gpu_data());
    } else {
      gpu_index_.ReshapeLike(*top[0]);
      index = gpu_index_.mutable_gpu_data();
    }
    MaxForward<float>
        <<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, x, shape, y, index, offsets);
  } else if (pool_ == caffe::PoolingParameter::AVE) {
    AveForward<float><<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, x, shape, y);
  } else if (phase() == caffe::TRAIN) {  // STOCHASTIC
    gpu_index_.ReshapeLike(*top[0]);
    float* index = gpu_index_.mutable_gpu_data();
    math::gpu::RngUniform(*ctx_, static_cast<int>(count), 0.0f, 1.0f, index);
    StochasticForwardTrain<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, x, shape, y,
                                                                               index);
  } else {
    StochasticForwardTest<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, x, shape, y);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

void PoolingLayer::BackwardGpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const bool half = HalfTensors() != HalfType::kNone;
  const PoolShape shape = MakeShape(channels_, height_, width_, pooled_h_, pooled_w_, kernel_h_,
                                    kernel_w_, stride_h_, stride_w_, pad_h_, pad_w_,
                                    half && bottom[0]->home_nhwc(), half && top[0]->home_nhwc());
  const int64_t count = bottom[0]->count();
  const cudaStream_t stream = cuda::Stream(*ctx_);
  if (const HalfType half = HalfTensors(); half != HalfType::kNone) {  // MAX or AVE, one top
    half_values::WithValueType(half, [&](auto tag) {
      using T = decltype(tag);
      const T* dy = half_values::Diff<T>(*top[0], half);
      T* dx = half_values::MutableDiff<T>(*bottom[0], half);
      if (pool_ == caffe::PoolingParameter::MAX && MaxOffsetsFit()) {
        const auto* offsets = reinterpret_cast<const uint8_t*>(gpu_index_.gpu_data());
        OffsetBackward<T>
            <<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, dy, offsets, shape, dx);
      } else if (pool_ == caffe::PoolingParameter::MAX) {
        IndexBackward<T><<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
            count, dy, gpu_index_.gpu_data(), shape, dx);
      } else {
        AveBackward<T><<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, dy, shape, dx);
      }
      CORTADO_CUDA_CHECK_LAUNCH();
    });
    return;
  }
  const float* top_diff = top[0]->gpu_diff();
  float* bottom_diff = bottom[0]->mutable_gpu_diff();
  const bool stochastic = pool_ == caffe::PoolingParameter::STOCHASTIC;
  if (pool_ == caffe::PoolingParameter::MAX && top.size() == 1 && MaxOffsetsFit()) {
    const auto* offsets = reinterpret_cast<const uint8_t*>(gpu_index_.gpu_data());
    OffsetBackward<float><<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
        count, top_diff, offsets, shape, bottom_diff);
  } else if (pool_ == caffe::PoolingParameter::MAX || (stochastic && phase() == caffe::TRAIN)) {
    const float* index = top.size() > 1 ? top[1]->gpu_data() : gpu_index_.gpu_data();
    IndexBackward<float><<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, top_diff, index,
                                                                             shape, bottom_diff);
  } else if (stochastic) {
    StochasticBackwardTest<<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(
        count, bottom[0]->gpu_data(), top[0]->gpu_data(), top_diff, shape, bottom_diff);
  } else {
    AveBackward<float>
        <<<cuda::Blocks(count), cuda::kThreads, 0, stream>>>(count, top_diff, shape, bottom_diff);
  }
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
