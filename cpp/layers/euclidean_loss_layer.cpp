// SPDX-License-Identifier: Apache-2.0
#include "layers/euclidean_loss_layer.hpp"

#include "math/math.hpp"

namespace cortado {

void EuclideanLossLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                               const std::vector<Tensor*>& /*top*/) {
  // Loss layers weigh their loss top by 1 unless told otherwise (Caffe's LossLayer).
  if (param_.loss_weight_size() == 0) param_.add_loss_weight(1.0f);
}

void EuclideanLossLayer::Reshape(const std::vector<Tensor*>& bottom,
                                 const std::vector<Tensor*>& top) {
  if (bottom[0]->num_axes() < 1 || bottom[1]->num_axes() < 1 ||
      bottom[0]->shape(0) != bottom[1]->shape(0) || bottom[0]->count(1) != bottom[1]->count(1)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: inputs must have the same first dimension and the same count per sample, "
                  "got {} and {}",
                  Describe(), bottom[0]->ShapeString(), bottom[1]->ShapeString());
  }
  if (bottom[0]->shape(0) == 0) {
    // The loss is a mean over the samples: with none it would be 0 / 0.
    CORTADO_THROW(kInvalidArgument, "{}: inputs of shape {} hold no sample; the loss needs one",
                  Describe(), bottom[0]->ShapeString());
  }
  diff_.ReshapeLike(*bottom[0]);
  top[0]->Reshape(std::vector<int>{});
}

void EuclideanLossLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                    const std::vector<Tensor*>& top) {
  const int count = bottom[0]->count();
  float* diff = diff_.mutable_cpu_data();
  math::Sub(count, bottom[0]->cpu_data(), bottom[1]->cpu_data(), diff);
  const float sumsq = math::Dot(count, diff, diff);
  top[0]->mutable_cpu_data()[0] = sumsq / static_cast<float>(bottom[0]->shape(0)) / 2.0f;
}

void EuclideanLossLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                     const std::vector<bool>& propagate_down,
                                     const std::vector<Tensor*>& bottom) {
  for (int i = 0; i < 2; ++i) {
    if (!propagate_down[i]) continue;
    const float sign = i == 0 ? 1.0f : -1.0f;
    const float alpha = sign * top[0]->cpu_diff()[0] / static_cast<float>(bottom[i]->shape(0));
    math::Scale(bottom[i]->count(), alpha, diff_.cpu_data(), bottom[i]->mutable_cpu_diff());
  }
}

CORTADO_REGISTER_LAYER(EuclideanLoss, EuclideanLossLayer);

}  // namespace cortado
