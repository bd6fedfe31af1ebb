// SPDX-License-Identifier: Apache-2.0
// im2col / col2im for convolution as matrix multiplication. Output sizes follow Caffe:
// out = (in + 2*pad - (dilation*(kernel-1)+1)) / stride + 1.
#include <cstring>
#include <vector>

#include "math/math.hpp"

// Im2col and Col2im run serially on purpose. They are called once per image between
// OpenBLAS GEMMs, and OpenBLAS (pthread build) keeps its own worker threads: an OpenMP
// region here makes the two thread pools fight for the cores on every image. On the 2-core
// machine with other load this made CIFAR-10 conv1/conv2 forward 10-40x slower (0.5-2 s
// instead of 25-50 ms per batch of 100); serial unrolling costs little next to the GEMM.
namespace cortado::math {
namespace {

inline int OutputSize(int in, int kernel, int pad, int stride, int dilation) {
  return (in + 2 * pad - (dilation * (kernel - 1) + 1)) / stride + 1;
}

}  // namespace

void Im2col(const float* image, int channels, int height, int width, int kernel_h, int kernel_w,
            int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h, int dilation_w,
            float* columns) {
  const int out_h = OutputSize(height, kernel_h, pad_h, stride_h, dilation_h);
  const int out_w = OutputSize(width, kernel_w, pad_w, stride_w, dilation_w);
  const int rows = channels * kernel_h * kernel_w;
  for (int row = 0; row < rows; ++row) {
    const int kw = row % kernel_w;
    const int kh = (row / kernel_w) % kernel_h;
    const int c = row / (kernel_w * kernel_h);
    const float* plane = image + static_cast<size_t>(c) * height * width;
    float* out = columns + static_cast<size_t>(row) * out_h * out_w;
    for (int oh = 0; oh < out_h; ++oh) {
      const int ih = oh * stride_h - pad_h + kh * dilation_h;
      if (ih < 0 || ih >= height) {
        std::memset(out, 0, sizeof(float) * out_w);
        out += out_w;
        continue;
      }
      const float* src = plane + static_cast<size_t>(ih) * width;
      int iw = kw * dilation_w - pad_w;
      if (stride_w == 1) {
        for (int ow = 0; ow < out_w; ++ow, ++iw) {
          out[ow] = (iw >= 0 && iw < width) ? src[iw] : 0.0f;
        }
      } else {
        for (int ow = 0; ow < out_w; ++ow, iw += stride_w) {
          out[ow] = (iw >= 0 && iw < width) ? src[iw] : 0.0f;
        }
      }
      out += out_w;
    }
  }
}

void Col2im(const float* columns, int channels, int height, int width, int kernel_h, int kernel_w,
            int pad_h, int pad_w, int stride_h, int stride_w, int dilation_h, int dilation_w,
            float* image) {
  const int out_h = OutputSize(height, kernel_h, pad_h, stride_h, dilation_h);
  const int out_w = OutputSize(width, kernel_w, pad_w, stride_w, dilation_w);
  std::memset(image, 0, sizeof(float) * static_cast<size_t>(channels) * height * width);
  for (int c = 0; c < channels; ++c) {
    float* plane = image + static_cast<size_t>(c) * height * width;
    for (int kh = 0; kh < kernel_h; ++kh) {
      for (int kw = 0; kw < kernel_w; ++kw) {
        const int row = (c * kernel_h + kh) * kernel_w + kw;
        const float* in = columns + static_cast<size_t>(row) * out_h * out_w;
        for (int oh = 0; oh < out_h; ++oh, in += out_w) {
          const int ih = oh * stride_h - pad_h + kh * dilation_h;
          if (ih < 0 || ih >= height) continue;
          float* dst = plane + static_cast<size_t>(ih) * width;
          int iw = kw * dilation_w - pad_w;
          for (int ow = 0; ow < out_w; ++ow, iw += stride_w) {
            if (iw >= 0 && iw < width) dst[iw] += in[ow];
          }
        }
      }
    }
  }
}

namespace {

// Walks every (column row, output position) pair of an N-D convolution and calls
// f(column_index, image_index) for positions inside the image (padding is skipped).
template <typename F>
void ForEachNd(int num_axes, const int* image_shape, const int* column_shape,
               const int* kernel_shape, const int* pad, const int* stride, const int* dilation,
               F f) {
  // column_shape = {channels * prod(kernel), out_0, out_1, ...}; image_shape = {channels, in...}
  int kernel_size = 1;
  for (int i = 0; i < num_axes; ++i) kernel_size *= kernel_shape[i];
  int out_size = 1;
  for (int i = 0; i < num_axes; ++i) out_size *= column_shape[i + 1];
  const int rows = column_shape[0];
  std::vector<int> kernel_index(num_axes), out_index(num_axes);
  for (int row = 0; row < rows; ++row) {
    int rem = row % kernel_size;
    for (int i = num_axes - 1; i >= 0; --i) {
      kernel_index[i] = rem % kernel_shape[i];
      rem /= kernel_shape[i];
    }
    const int channel = row / kernel_size;
    for (int pos = 0; pos < out_size; ++pos) {
      int r = pos;
      for (int i = num_axes - 1; i >= 0; --i) {
        out_index[i] = r % column_shape[i + 1];
        r /= column_shape[i + 1];
      }
      int image_index = channel;
      bool inside = true;
      for (int i = 0; i < num_axes; ++i) {
        int in = out_index[i] * stride[i] - pad[i] + kernel_index[i] * dilation[i];
        if (in < 0 || in >= image_shape[i + 1]) {
          inside = false;
          break;
        }
        image_index = image_index * image_shape[i + 1] + in;
      }
      f(static_cast<size_t>(row) * out_size + pos, inside ? image_index : -1);
    }
  }
}

}  // namespace

void Im2colNd(const float* image, int num_spatial_axes, const int* image_shape,
              const int* column_shape, const int* kernel_shape, const int* pad, const int* stride,
              const int* dilation, float* columns) {
  ForEachNd(num_spatial_axes, image_shape, column_shape, kernel_shape, pad, stride, dilation,
            [&](size_t col, int img) { columns[col] = img >= 0 ? image[img] : 0.0f; });
}

void Col2imNd(const float* columns, int num_spatial_axes, const int* image_shape,
              const int* column_shape, const int* kernel_shape, const int* pad, const int* stride,
              const int* dilation, float* image) {
  size_t image_count = static_cast<size_t>(image_shape[0]);
  for (int i = 0; i < num_spatial_axes; ++i) image_count *= image_shape[i + 1];
  std::memset(image, 0, sizeof(float) * image_count);
  ForEachNd(num_spatial_axes, image_shape, column_shape, kernel_shape, pad, stride, dilation,
            [&](size_t col, int img) {
              if (img >= 0) image[img] += columns[col];
            });
}

}  // namespace cortado::math
