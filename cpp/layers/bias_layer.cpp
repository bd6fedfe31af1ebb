// SPDX-License-Identifier: Apache-2.0
#include "layers/bias_layer.hpp"

#include "layers/filler.hpp"
#include "math/math.hpp"

namespace cortado {

void BiasLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& /*top*/) {
  // With a second bottom there is nothing to learn; with weights already present (as Caffe,
  // which skips initialisation then) keep them.
  if (bottom.size() > 1 || !blobs_.empty()) return;
  const auto& p = param_.bias_param();
  const Tensor& in = *bottom[0];
  const int n = in.num_axes();
  if (p.axis() < -n || p.axis() >= n) {
    CORTADO_THROW(kInvalidArgument, "{}: axis {} is out of range for bottom 0 of shape {}",
                  Describe(), p.axis(), in.ShapeString());
  }
  const int axis = p.axis() < 0 ? p.axis() + n : p.axis();
  if (p.num_axes() < -1 || (p.num_axes() >= 0 && axis + p.num_axes() > n)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: num_axes {} from axis {} does not fit bottom 0 of shape {}", Describe(),
                  p.num_axes(), axis, in.ShapeString());
  }
  const int end = p.num_axes() == -1 ? n : axis + p.num_axes();
  auto bias = std::make_shared<Tensor>(
      std::vector<int>(in.shape().begin() + axis, in.shape().begin() + end));
  caffe::FillerParameter filler = p.filler();
  if (!p.has_filler()) {
    filler.set_type("constant");
    filler.set_value(0.0f);
  }
  Fill(filler, ctx_->rng(), bias.get());
  blobs_.push_back(std::move(bias));
}

void BiasLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  const Tensor& bias = bottom.size() > 1 ? *bottom[1] : *blobs_[0];
  const int n = in.num_axes();
  int axis = 0;
  if (bias.num_axes() > 0) {
    const int a = param_.bias_param().axis();
    if (a < -n || a >= n) {
      CORTADO_THROW(kInvalidArgument, "{}: axis {} is out of range for bottom 0 of shape {}",
                    Describe(), a, in.ShapeString());
    }
    axis = a < 0 ? a + n : a;
  }
  bool fits = axis + bias.num_axes() <= n;
  for (int i = 0; fits && i < bias.num_axes(); ++i) fits = in.shape(axis + i) == bias.shape(i);
  if (!fits) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: bias of shape {} does not match bottom 0 of shape {} from axis {}",
                  Describe(), bias.ShapeString(), in.ShapeString(), axis);
  }
  outer_dim_ = in.count(0, axis);
  bias_dim_ = bias.count();
  inner_dim_ = in.count(axis + bias.num_axes());
  if (top[0] != bottom[0]) top[0]->ReshapeLike(in);
}

void BiasLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const float* bias = (bottom.size() > 1 ? bottom[1] : blobs_[0].get())->cpu_data();
  float* out = top[0]->mutable_cpu_data();
  if (top[0] != bottom[0]) math::Copy(bottom[0]->count(), bottom[0]->cpu_data(), out);
  for (int o = 0; o < outer_dim_; ++o) {
    for (int d = 0; d < bias_dim_; ++d) {
      math::AddScalar(inner_dim_, bias[d], out);
      out += inner_dim_;
    }
  }
}

void BiasLayer::BackwardCpu(const std::vector<Tensor*>& top,
                            const std::vector<bool>& propagate_down,
                            const std::vector<Tensor*>& bottom) {
  const float* top_diff = top[0]->cpu_diff();
  if (propagate_down[0] && bottom[0] != top[0]) {
    math::Copy(bottom[0]->count(), top_diff, bottom[0]->mutable_cpu_diff());
  }
  const bool learned = bottom.size() == 1;
  if (learned ? !param_propagate_down(0) : !propagate_down[1]) return;
  // A learned bias accumulates its gradient (shared weights); bottom[1]'s diff is overwritten.
  Tensor* bias = learned ? blobs_[0].get() : bottom[1];
  float* bias_diff = bias->mutable_cpu_diff();
  if (!learned) math::Set(bias_dim_, 0.0f, bias_diff);
  for (int o = 0; o < outer_dim_; ++o) {
    for (int d = 0; d < bias_dim_; ++d) {
      bias_diff[d] += math::Sum(inner_dim_, top_diff);
      top_diff += inner_dim_;
    }
  }
}

CORTADO_REGISTER_LAYER(Bias, BiasLayer);

}  // namespace cortado
