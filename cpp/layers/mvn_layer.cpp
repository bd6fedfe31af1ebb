// SPDX-License-Identifier: Apache-2.0
#include "layers/mvn_layer.hpp"

#include <cmath>

#include "math/math.hpp"

namespace cortado {

void MVNLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  if (in.num_axes() > 4) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: bottom must have at most 4 axes (N x C x H x W), got shape {}", Describe(),
                  in.ShapeString());
  }
  const int num = in.num(), channels = in.channels(), height = in.height(), width = in.width();
  num_ = param_.mvn_param().across_channels() ? num : num * channels;
  dim_ = num_ == 0 ? 0 : in.count() / num_;
  // Caffe gives the top the legacy 4-axis shape whatever the bottom's axis count.
  top[0]->Reshape(num, channels, height, width);
  std_.Reshape({num_});
}

void MVNLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  float* sd = std_.mutable_cpu_data();
  const bool normalize = param_.mvn_param().normalize_variance();
  const float eps = param_.mvn_param().eps();
  const int num = num_, dim = dim_;
#pragma omp parallel for if (bottom[0]->count() > math::kParallelThreshold) schedule(static)
  for (int r = 0; r < num; ++r) {
    const size_t offset = static_cast<size_t>(r) * dim;
    double sum = 0.0;
    for (int j = 0; j < dim; ++j) sum += x[offset + j];
    const float mean = static_cast<float>(sum / dim);
    if (!normalize) {
      for (int j = 0; j < dim; ++j) y[offset + j] = x[offset + j] - mean;
      continue;
    }
    // Two passes, as Caffe: the variance is the mean square of the centred values.
    double sumsq = 0.0;
    for (int j = 0; j < dim; ++j) {
      const float d = x[offset + j] - mean;
      sumsq += static_cast<double>(d) * d;
    }
    const float s = std::sqrt(static_cast<float>(sumsq / dim)) + eps;
    sd[r] = s;
    for (int j = 0; j < dim; ++j) y[offset + j] = (x[offset + j] - mean) / s;
  }
}

void MVNLayer::BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) {
  if (!propagate_down[0]) return;
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const float* sd = std_.cpu_data();
  const bool normalize = param_.mvn_param().normalize_variance();
  const int num = num_, dim = dim_;
  const float inv_dim = static_cast<float>(1.0 / dim);
  // In place dx is dy and y is x: each row's sums are taken before the row is written.
#pragma omp parallel for if (bottom[0]->count() > math::kParallelThreshold) schedule(static)
  for (int r = 0; r < num; ++r) {
    const size_t offset = static_cast<size_t>(r) * dim;
    double sum_dy = 0.0, sum_dy_y = 0.0;
    for (int j = 0; j < dim; ++j) {
      sum_dy += dy[offset + j];
      sum_dy_y += static_cast<double>(dy[offset + j]) * y[offset + j];
    }
    if (!normalize) {
      const float mean_dy = static_cast<float>(sum_dy / dim);
      for (int j = 0; j < dim; ++j) dx[offset + j] = dy[offset + j] - mean_dy;
      continue;
    }
    const float a = static_cast<float>(sum_dy_y), b = static_cast<float>(sum_dy);
    const float s = sd[r];
    for (int j = 0; j < dim; ++j) {
      dx[offset + j] = (dy[offset + j] - (y[offset + j] * a + b) * inv_dim) / s;
    }
  }
}

CORTADO_REGISTER_LAYER(MVN, MVNLayer);

}  // namespace cortado
