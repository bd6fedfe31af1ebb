// SPDX-License-Identifier: Apache-2.0
#include "layers/accuracy_layer.hpp"

#include <algorithm>
#include <cstdint>

#include "layers/class_axis.hpp"

namespace cortado {

void AccuracyLayer::Setup(const std::vector<Tensor*>& /*bottom*/,
                          const std::vector<Tensor*>& /*top*/) {
  const auto& p = param_.accuracy_param();
  if (p.top_k() < 1 || p.top_k() > static_cast<unsigned>(INT32_MAX)) {
    CORTADO_THROW(kInvalidArgument, "{}: top_k must be at least 1, got {}", Describe(), p.top_k());
  }
  top_k_ = static_cast<int>(p.top_k());
  has_ignore_label_ = p.has_ignore_label();
  ignore_label_ = p.ignore_label();
}

void AccuracyLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const ClassAxis split =
      SplitAtClassAxis(Describe(), *bottom[0], *bottom[1], param_.accuracy_param().axis(),
                       /*same_first_axis=*/false);
  outer_num_ = split.outer;
  classes_ = split.classes;
  inner_num_ = split.inner;
  if (top_k_ > classes_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: top_k ({}) must not exceed the number of classes ({}, scores {})",
                  Describe(), top_k_, classes_, bottom[0]->ShapeString());
  }
  top[0]->Reshape(std::vector<int>{});
  if (top.size() > 1) top[1]->Reshape(std::vector<int>{classes_});
  label_counts_.assign(classes_, 0);
}

void AccuracyLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                               const std::vector<Tensor*>& top) {
  const float* scores = bottom[0]->cpu_data();
  const float* labels = bottom[1]->cpu_data();
  const bool per_class = top.size() > 1;
  float* class_hits = per_class ? top[1]->mutable_cpu_data() : nullptr;
  if (per_class) std::fill(class_hits, class_hits + classes_, 0.0f);
  std::fill(label_counts_.begin(), label_counts_.end(), 0);
  const int dim = classes_ * inner_num_;
  int hits = 0;
  int count = 0;
  for (int i = 0; i < outer_num_; ++i) {
    for (int j = 0; j < inner_num_; ++j) {
      const int label = static_cast<int>(labels[i * inner_num_ + j]);
      if (has_ignore_label_ && label == ignore_label_) continue;
      if (label < 0 || label >= classes_) {
        CORTADO_THROW(kInvalidArgument, "{}: label value {} at position {} is outside [0, {})",
                      Describe(), label, i * inner_num_ + j, classes_);
      }
      ++label_counts_[label];
      const float* s = scores + i * dim + j;
      const float truth = s[label * inner_num_];
      // Classes scoring at least as high as the true one, the true one included.
      int at_least = 0;
      for (int c = 0; c < classes_ && at_least <= top_k_; ++c) {
        at_least += s[c * inner_num_] >= truth ? 1 : 0;
      }
      if (at_least <= top_k_) {
        ++hits;
        if (per_class) class_hits[label] += 1.0f;
      }
      ++count;
    }
  }
  top[0]->mutable_cpu_data()[0] =
      count == 0 ? 0.0f : static_cast<float>(hits) / static_cast<float>(count);
  if (per_class) {
    for (int c = 0; c < classes_; ++c) {
      class_hits[c] = label_counts_[c] == 0 ? 0.0f : class_hits[c] / label_counts_[c];
    }
  }
}

void AccuracyLayer::BackwardCpu(const std::vector<Tensor*>& /*top*/,
                                const std::vector<bool>& propagate_down,
                                const std::vector<Tensor*>& /*bottom*/) {
  if (propagate_down[0]) {
    CORTADO_THROW(kUnimplemented, "{} has no backward pass", Describe());
  }
}

CORTADO_REGISTER_LAYER(Accuracy, AccuracyLayer);

}  // namespace cortado
