// SPDX-License-Identifier: Apache-2.0
#include "layers/lrn_layer.hpp"

#include <algorithm>

#include "math/math.hpp"

namespace cortado {

void LRNLayer::Setup(const std::vector<Tensor*>& /*bottom*/, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.lrn_param();
  size_ = static_cast<int>(p.local_size());
  if (size_ % 2 != 1) {
    CORTADO_THROW(kInvalidArgument, "{}: local_size must be odd, got {}", Describe(),
                  p.local_size());
  }
  pre_pad_ = (size_ - 1) / 2;
  alpha_ = p.alpha();
  beta_ = p.beta();
  k_ = p.k();
  across_channels_ = p.norm_region() == caffe::LRNParameter::ACROSS_CHANNELS;
}

void LRNLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  if (top[0] == bottom[0]) {
    CORTADO_THROW(kInvalidArgument, "{}: LRN cannot run in place", Describe());
  }
  if (in.num_axes() != 4) {
    CORTADO_THROW(kInvalidArgument, "{}: bottom must have 4 axes (N x C x H x W), got shape {}",
                  Describe(), in.ShapeString());
  }
  num_ = in.num();
  channels_ = in.channels();
  height_ = in.height();
  width_ = in.width();
  top[0]->ReshapeLike(in);
  scale_.ReshapeLike(in);
  const size_t plane = static_cast<size_t>(height_) * width_;
  if (across_channels_) {
    padded_.assign((channels_ + size_ - 1) * plane, 0.0f);
  } else {
    padded_.assign(static_cast<size_t>(height_ + size_ - 1) * (width_ + size_ - 1), 0.0f);
  }
  accum_.assign(plane, 0.0f);
}

void LRNLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (across_channels_) {
    CrossChannelForward(*bottom[0], top[0]);
  } else {
    WithinChannelForward(*bottom[0], top[0]);
  }
}

void LRNLayer::BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  float* diff = bottom[0]->mutable_cpu_diff();
  if (across_channels_) {
    CrossChannelBackward(*top[0], *bottom[0], diff);
  } else {
    WithinChannelBackward(*top[0], *bottom[0], diff);
  }
}

// Channel windows are summed as Caffe does (lrn_layer.cpp): the window sum for channel c is
// the one for c - 1 plus the entering plane minus the leaving plane, so the rounding matches.
void LRNLayer::CrossChannelForward(const Tensor& bottom, Tensor* top) {
  const int plane = height_ * width_;
  const float alpha_over_size = alpha_ / size_;
  const float* in = bottom.cpu_data();
  float* scale = scale_.mutable_cpu_data();
  float* padded = padded_.data();  // the pre_pad_ planes at each end stay 0
  for (int n = 0; n < num_; ++n) {
    const int image = n * channels_ * plane;
    math::Sqr(channels_ * plane, in + image, padded + pre_pad_ * plane);
    float* s = scale + image;
    math::Set(plane, k_, s);
    for (int c = 0; c < size_; ++c) math::Axpy(plane, alpha_over_size, padded + c * plane, s);
    for (int c = 1; c < channels_; ++c) {
      float* sc = s + c * plane;
      math::Copy(plane, sc - plane, sc);
      math::Axpy(plane, alpha_over_size, padded + (c + size_ - 1) * plane, sc);
      math::Axpy(plane, -alpha_over_size, padded + (c - 1) * plane, sc);
    }
  }
  float* out = top->mutable_cpu_data();
  math::Powx(scale_.count(), scale, -beta_, out);
  math::Mul(scale_.count(), out, in, out);
}

// dx_j = dy_j * s_j^-beta - 2 alpha beta / n * x_j * sum over the channel window around j of
// dy_i * y_i / s_i (the window is symmetric because n is odd).
void LRNLayer::CrossChannelBackward(const Tensor& top, const Tensor& bottom, float* bottom_diff) {
  const int plane = height_ * width_;
  const float* top_diff = top.cpu_diff();
  const float* top_data = top.cpu_data();
  const float* in = bottom.cpu_data();
  const float* scale = scale_.cpu_data();
  const float ratio_coeff = 2.0f * alpha_ * beta_ / size_;
  const int count = scale_.count();
  math::Powx(count, scale, -beta_, bottom_diff);
  math::Mul(count, top_diff, bottom_diff, bottom_diff);
  float* ratio = padded_.data();  // dy * y / s per channel, zero planes at both ends
  float* accum = accum_.data();
  for (int n = 0; n < num_; ++n) {
    const int image = n * channels_ * plane;
    float* r = ratio + pre_pad_ * plane;
    math::Mul(channels_ * plane, top_diff + image, top_data + image, r);
    math::Div(channels_ * plane, r, scale + image, r);
    math::Set(plane, 0.0f, accum);
    for (int c = 0; c < size_ - 1; ++c) math::Axpy(plane, 1.0f, ratio + c * plane, accum);
    for (int c = 0; c < channels_; ++c) {
      math::Axpy(plane, 1.0f, ratio + (c + size_ - 1) * plane, accum);
      const float* x = in + image + c * plane;
      float* dx = bottom_diff + image + c * plane;
      for (int i = 0; i < plane; ++i) dx[i] -= ratio_coeff * (x[i] * accum[i]);
      math::Axpy(plane, -1.0f, ratio + c * plane, accum);
    }
  }
}

// Caffe: top = x * (1 + alpha * avgpool_n(x^2))^-beta, the pooling n x n, stride 1, padded by
// (n - 1) / 2, so every window averages over n * n cells (padding included).
void LRNLayer::WithinChannelForward(const Tensor& bottom, Tensor* top) {
  const int pw = width_ + size_ - 1;  // padded plane width
  const float pool_size = static_cast<float>(size_ * size_);
  const float* in = bottom.cpu_data();
  float* scale = scale_.mutable_cpu_data();
  float* padded = padded_.data();  // the border stays 0
  for (int p = 0; p < num_ * channels_; ++p) {
    const float* x = in + p * height_ * width_;
    for (int h = 0; h < height_; ++h) {
      math::Sqr(width_, x + h * width_, padded + (h + pre_pad_) * pw + pre_pad_);
    }
    float* s = scale + p * height_ * width_;
    for (int h = 0; h < height_; ++h) {
      for (int w = 0; w < width_; ++w) {
        float sum = 0.0f;
        for (int i = 0; i < size_; ++i) {
          const float* row = padded + (h + i) * pw + w;
          for (int j = 0; j < size_; ++j) sum += row[j];
        }
        s[h * width_ + w] = 1.0f + alpha_ * (sum / pool_size);
      }
    }
  }
  float* out = top->mutable_cpu_data();
  math::Powx(scale_.count(), scale, -beta_, out);
  math::Mul(scale_.count(), out, in, out);
}

// dx_j = dy_j * s_j^-beta - 2 alpha beta / n^2 * x_j * sum over the n x n window around j of
// dy_i * y_i / s_i.
void LRNLayer::WithinChannelBackward(const Tensor& top, const Tensor& bottom, float* bottom_diff) {
  const int plane = height_ * width_;
  const int pw = width_ + size_ - 1;
  const float* top_diff = top.cpu_diff();
  const float* top_data = top.cpu_data();
  const float* in = bottom.cpu_data();
  const float* scale = scale_.cpu_data();
  const float ratio_coeff = 2.0f * alpha_ * beta_ / static_cast<float>(size_ * size_);
  const int count = scale_.count();
  math::Powx(count, scale, -beta_, bottom_diff);
  math::Mul(count, top_diff, bottom_diff, bottom_diff);
  float* ratio = padded_.data();  // dy * y / s in a zero-bordered plane
  for (int p = 0; p < num_ * channels_; ++p) {
    const int offset = p * plane;
    for (int h = 0; h < height_; ++h) {
      float* r = ratio + (h + pre_pad_) * pw + pre_pad_;
      const int row = offset + h * width_;
      for (int w = 0; w < width_; ++w)
        r[w] = top_diff[row + w] * top_data[row + w] / scale[row + w];
    }
    for (int h = 0; h < height_; ++h) {
      for (int w = 0; w < width_; ++w) {
        float sum = 0.0f;
        for (int i = 0; i < size_; ++i) {
          const float* r = ratio + (h + i) * pw + w;
          for (int j = 0; j < size_; ++j) sum += r[j];
        }
        const int idx = offset + h * width_ + w;
        bottom_diff[idx] -= ratio_coeff * in[idx] * sum;
      }
    }
  }
}

CORTADO_REGISTER_LAYER(LRN, LRNLayer);

}  // namespace cortado
