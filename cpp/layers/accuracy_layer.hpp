// SPDX-License-Identifier: Apache-2.0
// Accuracy (Caffe type "Accuracy"): the fraction of positions whose true label is among the
// top_k scores. A label counts as a hit when fewer than top_k other classes score at least as
// high as it (so ties count against it, as in Caffe).
// Bottoms: 0 = scores with the class axis at accuracy_param.axis (default 1); 1 = labels, one
//          per position on the other axes (outer x inner values), read as int.
// Tops: 0 = accuracy, shape [] (count 1; 0 when every label is ignored); optional 1 = per-class
//       accuracy, shape [classes] (0 for classes with no labels in the batch).
// Params: accuracy_param.top_k (default 1, at most the number of classes), axis, ignore_label.
// No backward: asking for the scores' gradient throws kUnimplemented (Caffe: NOT_IMPLEMENTED).
// Difference from Caffe: labels out of range throw kInvalidArgument (Caffe: DCHECK only).
#pragma once

#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class AccuracyLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Accuracy"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override { return 2; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  int top_k_ = 1;
  bool has_ignore_label_ = false;
  int ignore_label_ = 0;
  int outer_num_ = 0;
  int classes_ = 0;
  int inner_num_ = 0;
  std::vector<int> label_counts_;  // per class, labels seen in the last forward
};

}  // namespace cortado
