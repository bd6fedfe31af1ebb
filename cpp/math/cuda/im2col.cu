// SPDX-License-Identifier: Apache-2.0
// GPU im2col/col2im (math/gpu.hpp). Col2im gathers: each image element sums the column
// entries that read it, so no atomics are needed and results repeat bit for bit.
#include "core/cuda.hpp"
#include "math/gpu.hpp"

namespace cortado::math::gpu {
namespace {

__global__ void Im2colKernel(int64_t n, const float* image, int height, int width, int kernel_h,
                             int kernel_w, int pad_h, int pad_w, int stride_h, int stride_w,
                             int dilation_h, int dilation_w, int out_h, int out_w, float* columns) {
  // One thread per (channel, output row, output column): writes kernel_h * kernel_w entries.
  CORTADO_KERNEL_LOOP(index, n) {
    const int ow = static_cast<int>(index % out_w);
    const int oh = static_cast<int>((index / out_w) % out_h);
    const int c = static_cast<int>(index / (static_cast<int64_t>(out_w) * out_h));
    const int h0 = oh * stride_h - pad_h, w0 = ow * stride_w - pad_w;
    const float* src = image + static_cast<int64_t>(c) * height * width;
    float* dst =
        columns + (static_cast<int64_t>(c) * kernel_h * kernel_w * out_h + oh) * out_w + ow;
    const int64_t plane = static_cast<int64_t>(out_h) * out_w;
    for (int i = 0; i < kernel_h; ++i) {
      const int h = h0 + i * dilation_h;
      for (int j = 0; j < kernel_w; ++j) {
        const int w = w0 + j * dilation_w;
        *dst = (h >= 0 && w >= 0 && h < height && w < width) ? src[h * width + w] : 0.0f;
        dst += plane;
      }
    }
  }
}

__global__ void Col2imKernel(int64_t n, const float* columns, int height, int width, int kernel_h,
                             int kernel_w, int pad_h, int pad_w, int stride_h, int stride_w,
                             int dilation_h, int dilation_w, int out_h, int out_w, float* image) {
  CORTADO_KERNEL_LOOP(index, n) {
    const int w = static_cast<int>(index % width) + pad_w;
    const int h = static_cast<int>((index / width) % height) + pad_h;
    const int c = static_cast<int>(index / (static_cast<int64_t>(width) * height));
    float sum = 0.0f;
    for (int i = 0; i < kernel_h; ++i) {
      const int hs = h - i * dilation_h;
      if (hs < 0 || hs % stride_h != 0) continue;
      const int oh = hs / stride_h;
      if (oh >= out_h) continue;
      for (int j = 0; j < kernel_w; ++j) {
        const int ws = w - j * dilation_w;
        if (ws < 0 || ws % stride_w != 0) continue;
        const int ow = ws / stride_w;
        if (ow >= out_w) continue;
        const int64_t row = (static_cast<int64_t>(c) * kernel_h + i) * kernel_w + j;
        sum += columns[(row * out_h + oh) * out_w + ow];
      }
    }
    image[index] = sum;
  }
}

constexpr int kMaxAxes = 6;

struct NdShape {
  int axes;
  int image[kMaxAxes + 1];    // channels, spatial...
  int columns[kMaxAxes + 1];  // channels * kernel size, output spatial...
  int kernel[kMaxAxes];
  int pad[kMaxAxes];
  int stride[kMaxAxes];
  int dilation[kMaxAxes];
};

NdShape MakeShape(int axes, const int* image_shape, const int* column_shape,
                  const int* kernel_shape, const int* pad, const int* stride, const int* dilation) {
  if (axes < 1 || axes > kMaxAxes) {
    CORTADO_THROW(kInvalidArgument, "GPU im2col handles 1 to {} spatial axes, not {}", kMaxAxes,
                  axes);
  }
  NdShape s{};
  s.axes = axes;
  for (int i = 0; i <= axes; ++i) {
    s.image[i] = image_shape[i];
    s.columns[i] = column_shape[i];
  }
  for (int i = 0; i < axes; ++i) {
    s.kernel[i] = kernel_shape[i];
    s.pad[i] = pad[i];
    s.stride[i] = stride[i];
    s.dilation[i] = dilation[i];
  }
  return s;
}

// One thread per column element: which image element it reads (or -1 for padding).
__global__ void Im2colNdKernel(int64_t n, const float* image, NdShape s, float* columns) {
  CORTADO_KERNEL_LOOP(index, n) {
    int64_t rest = index;
    int out[kMaxAxes];
    for (int a = s.axes - 1; a >= 0; --a) {
      out[a] = static_cast<int>(rest % s.columns[a + 1]);
      rest /= s.columns[a + 1];
    }
    int64_t row = rest;  // column row: channel * kernel size + kernel offset
    int koff[kMaxAxes];
    for (int a = s.axes - 1; a >= 0; --a) {
      koff[a] = static_cast<int>(row % s.kernel[a]);
      row /= s.kernel[a];
    }
    int64_t src = row;  // channel
    bool inside = true;
    for (int a = 0; a < s.axes; ++a) {
      const int pos = out[a] * s.stride[a] - s.pad[a] + koff[a] * s.dilation[a];
      inside = inside && pos >= 0 && pos < s.image[a + 1];
      src = src * s.image[a + 1] + pos;
    }
    columns[index] = inside ? image[src] : 0.0f;
  }
}

// One thread per image element: sums every column entry that reads it.
__global__ void Col2imNdKernel(int64_t n, const float* columns, NdShape s, int kernel_size,
                               float* image) {
  CORTADO_KERNEL_LOOP(index, n) {
    int64_t rest = index;
    int pos[kMaxAxes];
    for (int a = s.axes - 1; a >= 0; --a) {
      pos[a] = static_cast<int>(rest % s.image[a + 1]) + s.pad[a];
      rest /= s.image[a + 1];
    }
    const int64_t channel = rest;
    float sum = 0.0f;
    for (int k = 0; k < kernel_size; ++k) {
      int kk = k;
      int koff[kMaxAxes];
      for (int a = s.axes - 1; a >= 0; --a) {
        koff[a] = kk % s.kernel[a];
        kk /= s.kernel[a];
      }
      bool hit = true;
      int64_t col = channel * kernel_size + k;
      for (int a = 0; a < s.axes && hit; ++a) {
        const int shifted = pos[a] - koff[a] * s.dilation[a];
        hit =
            shifted >= 0 && shifted % s.stride[a] == 0 && shifted / s.stride[a] < s.columns[a + 1];
        col = col * s.columns[a + 1] + (hit ? shifted / s.stride[a] : 0);
      }
      if (hit) sum += columns[col];
    }
    image[index] = sum;
  }
}

int OutputSize(int size, int kernel, int pad, int stride, int dilation) {
  return (size + 2 * pad - (dilation * (kernel - 1) + 1)) / stride + 1;
}

}  // namespace

void Im2col(Context& ctx, const float* image, int channels, int height, int width, int kernel_h,
            int kernel_w, int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h,
            int dilation_w, float* columns) {
  const int out_h = OutputSize(height, kernel_h, pad_h, stride_h, dilation_h);
  const int out_w = OutputSize(width, kernel_w, pad_w, stride_w, dilation_w);
  const int64_t n = static_cast<int64_t>(channels) * out_h * out_w;
  if (n <= 0) return;
  Im2colKernel<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0,
                 ::cortado::cuda::Stream(ctx)>>>(n, image, height, width, kernel_h, kernel_w, pad_h,
                                                 pad_w, stride_h, stride_w, dilation_h, dilation_w,
                                                 out_h, out_w, columns);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void Col2im(Context& ctx, const float* columns, int channels, int height, int width, int kernel_h,
            int kernel_w, int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h,
            int dilation_w, float* image) {
  const int out_h = OutputSize(height, kernel_h, pad_h, stride_h, dilation_h);
  const int out_w = OutputSize(width, kernel_w, pad_w, stride_w, dilation_w);
  const int64_t n = static_cast<int64_t>(channels) * height * width;
  if (n <= 0) return;
  Col2imKernel<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0,
                 ::cortado::cuda::Stream(ctx)>>>(n, columns, height, width, kernel_h, kernel_w,
                                                 pad_h, pad_w, stride_h, stride_w, dilation_h,
                                                 dilation_w, out_h, out_w, image);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void Im2colNd(Context& ctx, const float* image, int num_spatial_axes, const int* image_shape,
              const int* column_shape, const int* kernel_shape, const int* pad, const int* stride,
              const int* dilation, float* columns) {
  const NdShape s =
      MakeShape(num_spatial_axes, image_shape, column_shape, kernel_shape, pad, stride, dilation);
  int64_t n = 1;
  for (int i = 0; i <= num_spatial_axes; ++i) n *= column_shape[i];
  if (n <= 0) return;
  Im2colNdKernel<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0,
                   ::cortado::cuda::Stream(ctx)>>>(n, image, s, columns);
  CORTADO_CUDA_CHECK_LAUNCH();
}

void Col2imNd(Context& ctx, const float* columns, int num_spatial_axes, const int* image_shape,
              const int* column_shape, const int* kernel_shape, const int* pad, const int* stride,
              const int* dilation, float* image) {
  const NdShape s =
      MakeShape(num_spatial_axes, image_shape, column_shape, kernel_shape, pad, stride, dilation);
  int64_t n = 1;
  int kernel_size = 1;
  for (int i = 0; i <= num_spatial_axes; ++i) n *= image_shape[i];
  for (int i = 0; i < num_spatial_axes; ++i) kernel_size *= kernel_shape[i];
  if (n <= 0) return;
  Col2imNdKernel<<<::cortado::cuda::Blocks(n), ::cortado::cuda::kThreads, 0,
                   ::cortado::cuda::Stream(ctx)>>>(n, columns, s, kernel_size, image);
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado::math::gpu
