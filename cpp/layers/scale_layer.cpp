// SPDX-License-Identifier: Apache-2.0
#include "layers/scale_layer.hpp"

#include "layers/filler.hpp"
#include "math/math.hpp"

namespace cortado {

void ScaleLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.scale_param();
  const Tensor& in = *bottom[0];
  const int n = in.num_axes();
  const int expected_blobs = (bottom.size() == 1 ? 1 : 0) + (p.bias_term() ? 1 : 0);
  if (!blobs_.empty()) {
    // Weights already present (Caffe skips initialisation then).
    if (static_cast<int>(blobs_.size()) != expected_blobs) {
      CORTADO_THROW(kInvalidArgument, "{}: has {} param blob(s); expected {}", Describe(),
                    blobs_.size(), expected_blobs);
    }
    bias_index_ = p.bias_term() ? expected_blobs - 1 : -1;
    return;
  }
  if (p.axis() < -n || p.axis() >= n) {
    CORTADO_THROW(kInvalidArgument, "{}: axis {} is out of range for bottom 0 of shape {}",
                  Describe(), p.axis(), in.ShapeString());
  }
  const int axis = p.axis() < 0 ? p.axis() + n : p.axis();
  // The learned scale covers num_axes axes; so does the bias, except that with a second
  // bottom it covers as many axes as bottom[1] has (as Caffe's inner Bias layer).
  auto make_param = [&](int num_axes, const caffe::FillerParameter& filler) {
    if (num_axes < -1 || (num_axes >= 0 && axis + num_axes > n)) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: num_axes {} from axis {} does not fit bottom 0 of shape {}", Describe(),
                    num_axes, axis, in.ShapeString());
    }
    const int end = num_axes == -1 ? n : axis + num_axes;
    auto blob = std::make_shared<Tensor>(
        std::vector<int>(in.shape().begin() + axis, in.shape().begin() + end));
    Fill(filler, ctx_->rng(), blob.get());
    blobs_.push_back(std::move(blob));
  };
  if (bottom.size() == 1) {
    caffe::FillerParameter filler = p.filler();
    if (!p.has_filler()) {
      filler.set_type("constant");
      filler.set_value(1.0f);
    }
    make_param(p.num_axes(), filler);
  }
  if (p.bias_term()) {
    // An unset bias_filler is FillerParameter's default: constant 0.
    make_param(bottom.size() > 1 ? bottom[1]->num_axes() : p.num_axes(), p.bias_filler());
    bias_index_ = static_cast<int>(blobs_.size()) - 1;
  }
}

void ScaleLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& in = *bottom[0];
  const Tensor& scale = bottom.size() > 1 ? *bottom[1] : *blobs_[0];
  const int n = in.num_axes();
  int axis = 0;
  if (scale.num_axes() > 0) {
    const int a = param_.scale_param().axis();
    if (a < -n || a >= n) {
      CORTADO_THROW(kInvalidArgument, "{}: axis {} is out of range for bottom 0 of shape {}",
                    Describe(), a, in.ShapeString());
    }
    axis = a < 0 ? a + n : a;
  }
  bool fits = axis + scale.num_axes() <= n;
  for (int i = 0; fits && i < scale.num_axes(); ++i) fits = in.shape(axis + i) == scale.shape(i);
  if (!fits) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: scale of shape {} does not match bottom 0 of shape {} from axis {}",
                  Describe(), scale.ShapeString(), in.ShapeString(), axis);
  }
  if (bias_index_ >= 0 && blobs_[bias_index_]->shape() != scale.shape()) {
    CORTADO_THROW(kInvalidArgument, "{}: bias of shape {} does not match scale of shape {}",
                  Describe(), blobs_[bias_index_]->ShapeString(), scale.ShapeString());
  }
  learned_ = bottom.size() == 1;
  axis_ = axis;
  outer_dim_ = in.count(0, axis);
  scale_dim_ = scale.count();
  inner_dim_ = in.count(axis + scale.num_axes());
  if (top[0] == bottom[0]) {
    saved_input_.ReshapeLike(in);
  } else {
    top[0]->ReshapeLike(in);
  }
}

void ScaleLayer::ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (top[0] == bottom[0]) {
    math::Copy(bottom[0]->count(), bottom[0]->cpu_data(), saved_input_.mutable_cpu_data());
  }
  const float* scale = (bottom.size() > 1 ? bottom[1] : blobs_[0].get())->cpu_data();
  const float* bias = bias_index_ >= 0 ? blobs_[bias_index_]->cpu_data() : nullptr;
  const float* in = bottom[0]->cpu_data();
  float* out = top[0]->mutable_cpu_data();
  for (int o = 0; o < outer_dim_; ++o) {
    for (int d = 0; d < scale_dim_; ++d) {
      math::Scale(inner_dim_, scale[d], in, out);
      if (bias != nullptr) math::AddScalar(inner_dim_, bias[d], out);
      in += inner_dim_;
      out += inner_dim_;
    }
  }
}

void ScaleLayer::BackwardCpu(const std::vector<Tensor*>& top,
                             const std::vector<bool>& propagate_down,
                             const std::vector<Tensor*>& bottom) {
  const float* top_diff = top[0]->cpu_diff();
  if (bias_index_ >= 0 && param_propagate_down(bias_index_)) {
    float* bias_diff = blobs_[bias_index_]->mutable_cpu_diff();
    const float* g = top_diff;
    for (int o = 0; o < outer_dim_; ++o) {
      for (int d = 0; d < scale_dim_; ++d) {
        bias_diff[d] += math::Sum(inner_dim_, g);
        g += inner_dim_;
      }
    }
  }
  const bool learned = bottom.size() == 1;
  if (learned ? param_propagate_down(0) : propagate_down[1]) {
    // d scale[d] = sum over outer and inner of top_diff * input. A learned scale accumulates
    // (shared weights); bottom[1]'s diff is overwritten.
    const float* in = (top[0] == bottom[0] ? &saved_input_ : bottom[0])->cpu_data();
    Tensor* scale = learned ? blobs_[0].get() : bottom[1];
    float* scale_diff = scale->mutable_cpu_diff();
    if (!learned) math::Set(scale_dim_, 0.0f, scale_diff);
    const float* g = top_diff;
    for (int o = 0; o < outer_dim_; ++o) {
      for (int d = 0; d < scale_dim_; ++d) {
        scale_diff[d] += math::Dot(inner_dim_, g, in);
        g += inner_dim_;
        in += inner_dim_;
      }
    }
  }
  if (propagate_down[0]) {
    // In place, bottom diff and top diff are one buffer; scaling element by element is safe.
    const float* scale = (learned ? blobs_[0].get() : bottom[1])->cpu_data();
    float* diff = bottom[0]->mutable_cpu_diff();
    const float* g = top_diff;
    for (int o = 0; o < outer_dim_; ++o) {
      for (int d = 0; d < scale_dim_; ++d) {
        math::Scale(inner_dim_, scale[d], g, diff);
        g += inner_dim_;
        diff += inner_dim_;
      }
    }
  }
}

CORTADO_REGISTER_LAYER(Scale, ScaleLayer);

}  // namespace cortado
