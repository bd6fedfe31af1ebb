// SPDX-License-Identifier: Apache-2.0
#include "layers/batch_norm_layer.hpp"

#include <cmath>

#include "math/math.hpp"

namespace cortado {

void BatchNormLayer::Setup(const std::vector<Tensor*>& bottom,
                           const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.batch_norm_param();
  use_global_stats_ = p.has_use_global_stats() ? p.use_global_stats() : phase() == caffe::TEST;
  moving_average_fraction_ = p.moving_average_fraction();
  eps_ = p.eps();
  if (bottom[0]->num_axes() < 2) {
    CORTADO_THROW(kInvalidArgument, "{}: bottom of shape {} has no channel axis (needs >= 2 axes)",
                  Describe(), bottom[0]->ShapeString());
  }
  channels_ = bottom[0]->shape(1);
  if (blobs_.empty()) {
    blobs_.push_back(std::make_shared<Tensor>(std::vector<int>{channels_}));
    blobs_.push_back(std::make_shared<Tensor>(std::vector<int>{channels_}));
    blobs_.push_back(std::make_shared<Tensor>(std::vector<int>{1}));
    for (auto& blob : blobs_) math::Set(blob->count(), 0.0f, blob->mutable_cpu_data());
  }
  // The statistics are not parameters: keep solvers and Backward away from them (as Caffe).
  for (int i = 0; i < static_cast<int>(blobs_.size()); ++i) {
    if (param_.param_size() == i) {
      param_.add_param()->set_lr_mult(0.0f);
    } else if (param_.param(i).lr_mult() != 0.0f) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: param {} has lr_mult {}; the batch statistics cannot be learned "
                    "(lr_mult must be 0)",
                    Describe(), i, param_.param(i).lr_mult());
    }
    set_param_propagate_down(i, false);
  }
}

void BatchNormLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  if (in.num_axes() < 2 || in.shape(1) != channels_) {
    CORTADO_THROW(kInvalidArgument, "{}: bottom of shape {} does not have {} channels on axis 1",
                  Describe(), in.ShapeString(), channels_);
  }
  if (top[0] != bottom[0]) top[0]->ReshapeLike(in);
  num_ = in.shape(0);
  spatial_dim_ = in.count(2);
  mean_.assign(channels_, 0.0f);
  std_.assign(channels_, 0.0f);
  x_norm_.ReshapeLike(in);
}

void BatchNormLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  const float* in = bottom[0]->cpu_data();
  float* out = top[0]->mutable_cpu_data();
  const int count = bottom[0]->count();
  const int m = count / channels_;  // values per channel
  std::vector<float> variance(channels_, 0.0f);

  if (use_global_stats_) {
    // A zero normaliser (no training yet) means all-zero statistics, as in Caffe.
    const float norm = blobs_[2]->cpu_data()[0];
    const float factor = norm == 0.0f ? 0.0f : 1.0f / norm;
    math::Scale(channels_, factor, blobs_[0]->cpu_data(), mean_.data());
    math::Scale(channels_, factor, blobs_[1]->cpu_data(), variance.data());
  } else {
    // Two passes (mean, then the mean of squared deviations), like Caffe.
    for (int c = 0; c < channels_; ++c) {
      double sum = 0.0;
      for (int n = 0; n < num_; ++n) {
        sum += math::Sum(spatial_dim_, in + (n * channels_ + c) * spatial_dim_);
      }
      mean_[c] = static_cast<float>(sum / m);
    }
    for (int c = 0; c < channels_; ++c) {
      double sum = 0.0;
      for (int n = 0; n < num_; ++n) {
        const float* x = in + (n * channels_ + c) * spatial_dim_;
        for (int i = 0; i < spatial_dim_; ++i) {
          const float d = x[i] - mean_[c];
          sum += d * d;
        }
      }
      variance[c] = static_cast<float>(sum / m);
    }
    // Running sums; the normaliser in blobs[2] turns them into averages.
    float* norm = blobs_[2]->mutable_cpu_data();
    norm[0] = norm[0] * moving_average_fraction_ + 1.0f;
    math::Axpby(channels_, 1.0f, mean_.data(), moving_average_fraction_,
                blobs_[0]->mutable_cpu_data());
    // Unbiased variance estimate for the running average, as Caffe.
    const float bias_correction = m > 1 ? static_cast<float>(m) / (m - 1) : 1.0f;
    math::Axpby(channels_, bias_correction, variance.data(), moving_average_fraction_,
                blobs_[1]->mutable_cpu_data());
  }
  for (int c = 0; c < channels_; ++c) std_[c] = std::sqrt(variance[c] + eps_);

  float* x_norm = x_norm_.mutable_cpu_data();
  for (int n = 0; n < num_; ++n) {
    for (int c = 0; c < channels_; ++c) {
      const int offset = (n * channels_ + c) * spatial_dim_;
      const float mean = mean_[c];
      const float sd = std_[c];
      // Divide (not multiply by 1 / std) to round as Caffe does.
      for (int i = 0; i < spatial_dim_; ++i) x_norm[offset + i] = (in[offset + i] - mean) / sd;
    }
  }
  math::Copy(count, x_norm, out);
}

void BatchNormLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  // In place, top diff and bottom diff are one buffer; every step below reads an element
  // before writing the same element.
  const float* top_diff = top[0]->cpu_diff();
  float* diff = bottom[0]->mutable_cpu_diff();
  if (use_global_stats_) {
    // The statistics are constants: y = (x - mean) / std.
    for (int n = 0; n < num_; ++n) {
      for (int c = 0; c < channels_; ++c) {
        const int offset = (n * channels_ + c) * spatial_dim_;
        for (int i = offset; i < offset + spatial_dim_; ++i) diff[i] = top_diff[i] / std_[c];
      }
    }
    return;
  }
  // With batch statistics, per channel (means over the channel's m values):
  //   dx = (dy - mean(dy) - mean(dy * y) * y) / std.
  const float* y = x_norm_.cpu_data();
  const int m = num_ * spatial_dim_;
  std::vector<double> mean_dy(channels_, 0.0), mean_dyy(channels_, 0.0);
  for (int n = 0; n < num_; ++n) {
    for (int c = 0; c < channels_; ++c) {
      const int offset = (n * channels_ + c) * spatial_dim_;
      mean_dy[c] += math::Sum(spatial_dim_, top_diff + offset);
      mean_dyy[c] += math::Dot(spatial_dim_, top_diff + offset, y + offset);
    }
  }
  for (int c = 0; c < channels_; ++c) {
    mean_dy[c] /= m;
    mean_dyy[c] /= m;
  }
  for (int n = 0; n < num_; ++n) {
    for (int c = 0; c < channels_; ++c) {
      const int offset = (n * channels_ + c) * spatial_dim_;
      const float a = static_cast<float>(mean_dy[c]);
      const float b = static_cast<float>(mean_dyy[c]);
      const float sd = std_[c];
      for (int i = offset; i < offset + spatial_dim_; ++i) {
        diff[i] = (top_diff[i] - a - b * y[i]) / sd;
      }
    }
  }
}

CORTADO_REGISTER_LAYER(BatchNorm, BatchNormLayer);

}  // namespace cortado
