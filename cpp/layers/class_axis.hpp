// SPDX-License-Identifier: Apache-2.0
// The layout shared by the layers that score classes along one axis and read one label per
// position (SoftmaxWithLoss, InfogainLoss, Accuracy): scores are outer x classes x inner around
// the class axis, labels hold outer * inner values.
#pragma once

#include <string>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace cortado {

struct ClassAxis {
  int axis = 0;
  int outer = 0;
  int classes = 0;
  int inner = 0;
};

// Splits `scores` around axis `axis_param` (negative counts from the end) and checks that
// `labels` holds one value per outer x inner position; with `same_first_axis`, also that both
// have the same first dimension. Errors begin with `layer` (Layer::Describe()) and name both
// shapes.
inline ClassAxis SplitAtClassAxis(const std::string& layer, const Tensor& scores,
                                  const Tensor& labels, int axis_param, bool same_first_axis) {
  if (same_first_axis &&
      (scores.num_axes() < 1 || labels.num_axes() < 1 || scores.shape(0) != labels.shape(0))) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: scores ({}) and labels ({}) must have the same first dimension", layer,
                  scores.ShapeString(), labels.ShapeString());
  }
  ClassAxis split;
  split.axis = scores.CanonicalAxisIndex(axis_param);
  split.outer = scores.count(0, split.axis);
  split.classes = scores.shape(split.axis);
  split.inner = scores.count(split.axis + 1);
  if (split.outer * split.inner != labels.count()) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the number of labels must match the number of predictions: scores {} with "
                  "the class axis {} need {} labels, got labels {}",
                  layer, scores.ShapeString(), split.axis, split.outer * split.inner,
                  labels.ShapeString());
  }
  return split;
}

}  // namespace cortado
