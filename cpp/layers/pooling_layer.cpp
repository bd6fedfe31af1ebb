// SPDX-License-Identifier: Apache-2.0
#include "layers/pooling_layer.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

// Forward splits the planes (image x channel) across the OpenMP threads, which OpenBLAS and
// oneDNN share now that Cortado links OpenBLAS's OpenMP build. Backward stays serial: with
// OpenBLAS's pthread build an OpenMP region there measured 8-11 ms against 0.2-1.8 ms serial
// (two thread pools fighting over 2 cores); re-measure before changing it.
namespace cortado {

void PoolingLayer::ThrowIfStochastic() const {
  if (pool_ == caffe::PoolingParameter::STOCHASTIC) {
    CORTADO_THROW(kUnimplemented,
                  "{}: STOCHASTIC pooling has no CPU implementation (Caffe has none either); "
                  "use MAX or AVE",
                  Describe());
  }
}

void PoolingLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.pooling_param();
  const std::string me = Describe();
  pool_ = p.pool();
  if (ctx_->device().is_cpu()) ThrowIfStochastic();
  global_ = p.global_pooling();
  const bool has_hw_kernel = p.has_kernel_h() || p.has_kernel_w();
  if (global_) {
    if (p.has_kernel_size() || has_hw_kernel) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: with global_pooling the kernel is the whole input; do not give a kernel "
                    "size",
                    me);
    }
  } else {
    if (p.has_kernel_size() && has_hw_kernel) {
      CORTADO_THROW(kInvalidArgument, "{}: give kernel_size or kernel_h and kernel_w, not both",
                    me);
    }
    if (!p.has_kernel_size() && !(p.has_kernel_h() && p.has_kernel_w())) {
      CORTADO_THROW(kInvalidArgument, "{}: needs kernel_size, or both kernel_h and kernel_w", me);
    }
  }
  if (p.has_pad_h() || p.has_pad_w()) {
    if (p.has_pad() || !(p.has_pad_h() && p.has_pad_w())) {
      CORTADO_THROW(kInvalidArgument, "{}: give pad, or both pad_h and pad_w", me);
    }
  }
  if (p.has_stride_h() || p.has_stride_w()) {
    if (p.has_stride() || !(p.has_stride_h() && p.has_stride_w())) {
      CORTADO_THROW(kInvalidArgument, "{}: give stride, or both stride_h and stride_w", me);
    }
  }
  if (!global_) {
    kernel_h_ = static_cast<int>(p.has_kernel_size() ? p.kernel_size() : p.kernel_h());
    kernel_w_ = static_cast<int>(p.has_kernel_size() ? p.kernel_size() : p.kernel_w());
    if (kernel_h_ <= 0 || kernel_w_ <= 0) {
      CORTADO_THROW(kInvalidArgument, "{}: kernel must be positive, got {}x{}", me, kernel_h_,
                    kernel_w_);
    }
  }
  pad_h_ = static_cast<int>(p.has_pad_h() ? p.pad_h() : p.pad());
  pad_w_ = static_cast<int>(p.has_pad_h() ? p.pad_w() : p.pad());
  stride_h_ = static_cast<int>(p.has_stride_h() ? p.stride_h() : p.stride());
  stride_w_ = static_cast<int>(p.has_stride_h() ? p.stride_w() : p.stride());
  if (stride_h_ <= 0 || stride_w_ <= 0) {
    CORTADO_THROW(kInvalidArgument, "{}: stride must be positive, got {}x{}", me, stride_h_,
                  stride_w_);
  }
  if (global_ && (pad_h_ != 0 || pad_w_ != 0 || stride_h_ != 1 || stride_w_ != 1)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: global_pooling allows only pad 0 and stride 1, got pad {}x{} stride {}x{}",
                  me, pad_h_, pad_w_, stride_h_, stride_w_);
  }
  if (!global_ && (pad_h_ != 0 || pad_w_ != 0)) {
    if (pool_ != caffe::PoolingParameter::MAX && pool_ != caffe::PoolingParameter::AVE) {
      CORTADO_THROW(kInvalidArgument, "{}: padding is implemented only for MAX and AVE pooling",
                    me);
    }
    if (pad_h_ >= kernel_h_ || pad_w_ >= kernel_w_) {
      CORTADO_THROW(kInvalidArgument, "{}: pad {}x{} must be smaller than the kernel {}x{}", me,
                    pad_h_, pad_w_, kernel_h_, kernel_w_);
    }
  }
  (void)bottom;
}

void PoolingLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  if (in.num_axes() != 4) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: bottom must have 4 axes (num, channels, height, width), got shape {}",
                  Describe(), in.ShapeString());
  }
  channels_ = in.shape(1);
  height_ = in.shape(2);
  width_ = in.shape(3);
  if (global_) {
    kernel_h_ = height_;
    kernel_w_ = width_;
  }
  if (height_ + 2 * pad_h_ < kernel_h_ || width_ + 2 * pad_w_ < kernel_w_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: kernel {}x{} is larger than the padded input (bottom shape {}, pad {}x{})",
                  Describe(), kernel_h_, kernel_w_, in.ShapeString(), pad_h_, pad_w_);
  }
  const bool ceil_mode = param_.pooling_param().round_mode() == caffe::PoolingParameter::CEIL;
  auto pooled = [ceil_mode](int size, int pad, int kernel, int stride) {
    const int span = size + 2 * pad - kernel;  // >= 0, checked above
    return (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  };
  pooled_h_ = pooled(height_, pad_h_, kernel_h_, stride_h_);
  pooled_w_ = pooled(width_, pad_w_, kernel_w_, stride_w_);
  if (pad_h_ != 0 || pad_w_ != 0) {
    // Caffe's rule: the last window must start inside the image or its leading padding;
    // one that would start in the trailing padding is dropped.
    if ((pooled_h_ - 1) * stride_h_ >= height_ + pad_h_) --pooled_h_;
    if ((pooled_w_ - 1) * stride_w_ >= width_ + pad_w_) --pooled_w_;
  }
  top[0]->Reshape(in.shape(0), channels_, pooled_h_, pooled_w_);
  if (top.size() > 1) top[1]->ReshapeLike(*top[0]);
  if (pool_ == caffe::PoolingParameter::MAX && top.size() == 1) {
    max_idx_.resize(top[0]->count());
  }
}

void PoolingLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  ThrowIfStochastic();
  const float* bottom_data = bottom[0]->cpu_data();
  float* top_data = top[0]->mutable_cpu_data();
  const int planes = bottom[0]->shape(0) * channels_;
  const int in_plane = height_ * width_;
  const int out_plane = pooled_h_ * pooled_w_;
  if (pool_ == caffe::PoolingParameter::MAX) {
    float* top_mask = top.size() > 1 ? top[1]->mutable_cpu_data() : nullptr;
    int* mask = top_mask ? nullptr : max_idx_.data();
    // A row of outputs at a time, each window's values visited in Caffe's order (rows, then
    // columns) with the first maximum winning on ties (strict >), as selects rather than
    // branches: a maximum among random values is a branch mispredicted about every other time.
#pragma omp parallel
    {
      std::vector<float> best(pooled_w_);
      std::vector<int> best_index(pooled_w_);
#pragma omp for schedule(static)
      for (int plane = 0; plane < planes; ++plane) {
        const float* src = bottom_data + static_cast<size_t>(plane) * in_plane;
        const size_t out_offset = static_cast<size_t>(plane) * out_plane;
        for (int ph = 0; ph < pooled_h_; ++ph) {
          const int hstart = std::max(ph * stride_h_ - pad_h_, 0);
          const int hend = std::min(ph * stride_h_ - pad_h_ + kernel_h_, height_);
          std::fill(best.begin(), best.end(), -FLT_MAX);
          std::fill(best_index.begin(), best_index.end(), -1);
          for (int h = hstart; h < hend; ++h) {
            const float* row = src + h * width_;
            for (int kw = 0; kw < kernel_w_; ++kw) {
              // Columns whose window has this kw inside the row: [first, last).
              const int offset = kw - pad_w_;
              const int first = offset >= 0 ? 0 : (-offset + stride_w_ - 1) / stride_w_;
              const int last = std::min(pooled_w_, (width_ - 1 - offset) / stride_w_ + 1);
              const int stride = stride_w_;
              float* b = best.data();
              int* bi = best_index.data();
              for (int pw = first; pw < last; ++pw) {
                const int w = pw * stride + offset;
                const float v = row[w];
                const bool larger = v > b[pw];
                b[pw] = larger ? v : b[pw];
                bi[pw] = larger ? h * width_ + w : bi[pw];
              }
            }
          }
          const size_t out = out_offset + static_cast<size_t>(ph) * pooled_w_;
          for (int pw = 0; pw < pooled_w_; ++pw) {
            top_data[out + pw] = best_index[pw] < 0 ? 0.0f : best[pw];
            if (top_mask) {
              top_mask[out + pw] = static_cast<float>(best_index[pw]);
            } else {
              mask[out + pw] = best_index[pw];
            }
          }
        }
      }
    }
  } else {
#pragma omp parallel for schedule(static)
    for (int plane = 0; plane < planes; ++plane) {
      const float* src = bottom_data + static_cast<size_t>(plane) * in_plane;
      float* dst = top_data + static_cast<size_t>(plane) * out_plane;
      for (int ph = 0; ph < pooled_h_; ++ph) {
        int hstart = ph * stride_h_ - pad_h_;
        int hend = std::min(hstart + kernel_h_, height_ + pad_h_);
        const int window_h = hend - hstart;
        hstart = std::max(hstart, 0);
        hend = std::min(hend, height_);
        for (int pw = 0; pw < pooled_w_; ++pw) {
          int wstart = pw * stride_w_ - pad_w_;
          int wend = std::min(wstart + kernel_w_, width_ + pad_w_);
          // The divisor counts padding inside [-pad, size + pad) (Caffe's rule).
          const int pool_size = window_h * (wend - wstart);
          wstart = std::max(wstart, 0);
          wend = std::min(wend, width_);
          float sum = 0.0f;
          for (int h = hstart; h < hend; ++h) {
            for (int w = wstart; w < wend; ++w) sum += src[h * width_ + w];
          }
          dst[ph * pooled_w_ + pw] = pool_size > 0 ? sum / pool_size : 0.0f;
        }
      }
    }
  }
}

void PoolingLayer::BackwardCpu(const std::vector<Tensor*>& top,
                               const std::vector<bool>& propagate_down,
                               const std::vector<Tensor*>& bottom) {
  ThrowIfStochastic();
  if (!propagate_down[0]) return;
  const float* top_diff = top[0]->cpu_diff();
  float* bottom_diff = bottom[0]->mutable_cpu_diff();
  const int planes = bottom[0]->shape(0) * channels_;
  const int in_plane = height_ * width_;
  const int out_plane = pooled_h_ * pooled_w_;
  if (pool_ == caffe::PoolingParameter::MAX) {
    const float* top_mask = top.size() > 1 ? top[1]->cpu_data() : nullptr;
    const int* mask = top_mask ? nullptr : max_idx_.data();
    for (int plane = 0; plane < planes; ++plane) {
      float* dst = bottom_diff + static_cast<size_t>(plane) * in_plane;
      std::fill(dst, dst + in_plane, 0.0f);
      const size_t out_offset = static_cast<size_t>(plane) * out_plane;
      for (int i = 0; i < out_plane; ++i) {
        const size_t out = out_offset + i;
        const int index = top_mask ? static_cast<int>(top_mask[out]) : mask[out];
        if (index >= 0) dst[index] += top_diff[out];
      }
    }
  } else {
    for (int plane = 0; plane < planes; ++plane) {
      float* dst = bottom_diff + static_cast<size_t>(plane) * in_plane;
      const float* src = top_diff + static_cast<size_t>(plane) * out_plane;
      std::fill(dst, dst + in_plane, 0.0f);
      for (int ph = 0; ph < pooled_h_; ++ph) {
        int hstart = ph * stride_h_ - pad_h_;
        int hend = std::min(hstart + kernel_h_, height_ + pad_h_);
        const int window_h = hend - hstart;
        hstart = std::max(hstart, 0);
        hend = std::min(hend, height_);
        for (int pw = 0; pw < pooled_w_; ++pw) {
          int wstart = pw * stride_w_ - pad_w_;
          int wend = std::min(wstart + kernel_w_, width_ + pad_w_);
          const int pool_size = window_h * (wend - wstart);
          wstart = std::max(wstart, 0);
          wend = std::min(wend, width_);
          if (pool_size <= 0) continue;
          const float g = src[ph * pooled_w_ + pw] / pool_size;
          for (int h = hstart; h < hend; ++h) {
            for (int w = wstart; w < wend; ++w) dst[h * width_ + w] += g;
          }
        }
      }
    }
  }
}

CORTADO_REGISTER_LAYER(Pooling, PoolingLayer);

}  // namespace cortado
