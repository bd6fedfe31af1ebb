// SPDX-License-Identifier: Apache-2.0
#include "layers/softmax_with_loss_layer.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "layers/class_axis.hpp"
#include "layers/loss_normalizer.hpp"
#include "math/math.hpp"

namespace cortado {

void SoftmaxWithLossLayer::Setup(const std::vector<Tensor*>& bottom,
                                 const std::vector<Tensor*>& top) {
  // Loss layers weigh their loss top by 1 unless told otherwise (Caffe's LossLayer). Caffe adds
  // only that one weight, so with the probability top its weight count check fails (BVLC/caffe
  // issue #2968); the probabilities get weight 0 here instead.
  if (param_.loss_weight_size() == 0) {
    param_.add_loss_weight(1.0f);
    for (size_t i = 1; i < top.size(); ++i) param_.add_loss_weight(0.0f);
  }

  // The probabilities come from an ordinary Softmax layer, so it runs on whichever device
  // this layer runs on (Caffe builds its internal layer the same way).
  caffe::LayerParameter softmax_param;
  softmax_param.set_name(name() + "/softmax");
  softmax_param.set_type("Softmax");
  *softmax_param.mutable_softmax_param() = param_.softmax_param();
  softmax_ = CreateLayer(softmax_param, ctx_);
  softmax_->Initialize({bottom[0]}, {&prob_});

  const auto& p = param_.loss_param();
  has_ignore_label_ = p.has_ignore_label();
  ignore_label_ = p.ignore_label();
  if (!p.has_normalization() && p.has_normalize()) {
    normalization_ = p.normalize() ? caffe::LossParameter::VALID : caffe::LossParameter::BATCH_SIZE;
  } else {
    normalization_ = p.normalization();
  }
}

void SoftmaxWithLossLayer::Reshape(const std::vector<Tensor*>& bottom,
                                   const std::vector<Tensor*>& top) {
  const ClassAxis split = SplitAtClassAxis(Describe(), *bottom[0], *bottom[1],
                                           param_.softmax_param().axis(), /*same_first_axis=*/true);
  softmax_->Reshape({bottom[0]}, {&prob_});
  outer_num_ = split.outer;
  classes_ = split.classes;
  inner_num_ = split.inner;
  top[0]->Reshape(std::vector<int>{});
  if (top.size() >= 2) top[1]->ReshapeLike(*bottom[0]);
}

float SoftmaxWithLossLayer::Normalizer(int valid_count) const {
  return LossNormalizer(normalization_, outer_num_, inner_num_, valid_count);
}

int SoftmaxWithLossLayer::LabelAt(const float* labels, int index) const {
  const int label = static_cast<int>(labels[index]);
  if (has_ignore_label_ && label == ignore_label_) return label;
  if (label < 0 || label >= classes_) {
    CORTADO_THROW(kInvalidArgument, "{}: label value {} at position {} is outside [0, {})",
                  Describe(), label, index, classes_);
  }
  return label;
}

void SoftmaxWithLossLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                      const std::vector<Tensor*>& top) {
  softmax_->Forward({bottom[0]}, {&prob_});
  const float* prob = prob_.cpu_data();
  const float* labels = bottom[1]->cpu_data();
  const int dim = classes_ * inner_num_;
  double loss = 0.0;
  int valid_count = 0;
  for (int i = 0; i < outer_num_; ++i) {
    for (int j = 0; j < inner_num_; ++j) {
      const int label = LabelAt(labels, i * inner_num_ + j);
      if (has_ignore_label_ && label == ignore_label_) continue;
      loss -= std::log(std::max(prob[i * dim + label * inner_num_ + j], FLT_MIN));
      ++valid_count;
    }
  }
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss) / Normalizer(valid_count);
  if (top.size() == 2) math::Copy(prob_.count(), prob, top[1]->mutable_cpu_data());
}

void SoftmaxWithLossLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                       const std::vector<bool>& propagate_down,
                                       const std::vector<Tensor*>& bottom) {
  if (propagate_down[1]) {
    CORTADO_THROW(kInvalidArgument, "{} cannot backpropagate to its label input (bottom 1)",
                  Describe());
  }
  if (!propagate_down[0]) return;
  // d loss / d x = p - onehot(label), zero at ignored positions, over the normalizer.
  float* diff = bottom[0]->mutable_cpu_diff();
  math::Copy(prob_.count(), prob_.cpu_data(), diff);
  const float* labels = bottom[1]->cpu_data();
  const int dim = classes_ * inner_num_;
  int valid_count = 0;
  for (int i = 0; i < outer_num_; ++i) {
    for (int j = 0; j < inner_num_; ++j) {
      const int label = LabelAt(labels, i * inner_num_ + j);
      if (has_ignore_label_ && label == ignore_label_) {
        for (int c = 0; c < classes_; ++c) diff[i * dim + c * inner_num_ + j] = 0.0f;
      } else {
        diff[i * dim + label * inner_num_ + j] -= 1.0f;
        ++valid_count;
      }
    }
  }
  math::Scale(prob_.count(), top[0]->cpu_diff()[0] / Normalizer(valid_count), diff);
}

CORTADO_REGISTER_LAYER(SoftmaxWithLoss, SoftmaxWithLossLayer);

}  // namespace cortado
