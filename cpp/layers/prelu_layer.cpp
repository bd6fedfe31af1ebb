// SPDX-License-Identifier: Apache-2.0
#include "layers/prelu_layer.hpp"

#include <algorithm>
#include <vector>

#include "layers/filler.hpp"
#include "math/math.hpp"

namespace cortado {

void PReLULayer::CheckBottom(const Tensor& bottom) const {
  if (bottom.num_axes() < 2) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: bottom must have at least 2 axes (num x channels x ...), got shape {}",
                  Describe(), bottom.ShapeString());
  }
  const int expected = channel_shared_ ? 1 : bottom.shape(1);
  if (blobs_[0]->count() != expected) {
    CORTADO_THROW(kInvalidArgument, "{}: slope blob has shape {} but bottom {} needs {} slope(s){}",
                  Describe(), blobs_[0]->ShapeString(), bottom.ShapeString(), expected,
                  channel_shared_ ? " (channel_shared)" : "");
  }
}

void PReLULayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.prelu_param();
  channel_shared_ = p.channel_shared();
  if (bottom[0]->num_axes() < 2) CheckBottom(*bottom[0]);  // throws with the shape
  if (blobs_.empty()) {
    // A shared slope is a 0-axis blob (one value), as Caffe saves it.
    blobs_.push_back(std::make_shared<Tensor>(
        channel_shared_ ? std::vector<int>{} : std::vector<int>{bottom[0]->shape(1)}));
    if (p.has_filler()) {
      Fill(p.filler(), ctx_->rng(), blobs_[0].get());
    } else {
      caffe::FillerParameter filler;
      filler.set_type("constant");
      filler.set_value(0.25f);
      Fill(filler, ctx_->rng(), blobs_[0].get());
    }
  }
  CheckBottom(*bottom[0]);
}

void PReLULayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  CheckBottom(*bottom[0]);
  top[0]->ReshapeLike(*bottom[0]);
  if (bottom[0] == top[0]) bottom_copy_.ReshapeLike(*bottom[0]);
}

void PReLULayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const int count = bottom[0]->count();
  if (bottom[0] == top[0])
    math::Copy(count, bottom[0]->cpu_data(), bottom_copy_.mutable_cpu_data());
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const float* slope = blobs_[0]->cpu_data();
  const int channels = bottom[0]->shape(1);
  const int rows = bottom[0]->shape(0) * channels;
  const int dim = bottom[0]->count(2);
  const bool shared = channel_shared_;
#pragma omp parallel for if (count > math::kParallelThreshold) schedule(static)
  for (int r = 0; r < rows; ++r) {
    const float a = slope[shared ? 0 : r % channels];
    const float* xr = x + static_cast<size_t>(r) * dim;
    float* yr = y + static_cast<size_t>(r) * dim;
    for (int i = 0; i < dim; ++i) yr[i] = std::max(xr[i], 0.0f) + a * std::min(xr[i], 0.0f);
  }
}

void PReLULayer::BackwardCpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  const float* x = bottom[0] == top[0] ? bottom_copy_.cpu_data() : bottom[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  const int channels = bottom[0]->shape(1);
  const int num = bottom[0]->shape(0);
  const int dim = bottom[0]->count(2);
  // The slope gradient goes first: in place, dx overwrites dy.
  if (param_propagate_down(0)) {
    std::vector<double> sums(channels, 0.0);
#pragma omp parallel for if (bottom[0]->count() > math::kParallelThreshold) schedule(static)
    for (int c = 0; c < channels; ++c) {
      double sum = 0.0;
      for (int n = 0; n < num; ++n) {
        const size_t offset = (static_cast<size_t>(n) * channels + c) * dim;
        for (int i = 0; i < dim; ++i) {
          const float xi = x[offset + i];
          if (xi <= 0.0f) sum += dy[offset + i] * xi;
        }
      }
      sums[c] = sum;
    }
    float* slope_diff = blobs_[0]->mutable_cpu_diff();
    for (int c = 0; c < channels; ++c) {
      slope_diff[channel_shared_ ? 0 : c] += static_cast<float>(sums[c]);
    }
  }
  if (propagate_down[0]) {
    const float* slope = blobs_[0]->cpu_data();
    float* dx = bottom[0]->mutable_cpu_diff();
    const int rows = num * channels;
    const bool shared = channel_shared_;
#pragma omp parallel for if (bottom[0]->count() > math::kParallelThreshold) schedule(static)
    for (int r = 0; r < rows; ++r) {
      const float a = slope[shared ? 0 : r % channels];
      const size_t offset = static_cast<size_t>(r) * dim;
      for (int i = 0; i < dim; ++i) {
        dx[offset + i] = x[offset + i] > 0.0f ? dy[offset + i] : dy[offset + i] * a;
      }
    }
  }
}

CORTADO_REGISTER_LAYER(PReLU, PReLULayer);

}  // namespace cortado
