// SPDX-License-Identifier: Apache-2.0
#include "layers/infogain_loss_layer.hpp"

#include <algorithm>
#include <cmath>

#include "io/proto_io.hpp"
#include "layers/class_axis.hpp"
#include "layers/loss_normalizer.hpp"
#include "math/math.hpp"

namespace cortado {
namespace {

// Caffe's kLOG_THRESHOLD (loss_layer.hpp): probabilities are clamped to it before the log.
constexpr float kLogThreshold = 1e-20f;

}  // namespace

void InfogainLossLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  // Loss layers weigh their loss top by 1 unless told otherwise (Caffe's LossLayer); the
  // probabilities get weight 0 (see softmax_with_loss_layer.cpp).
  if (param_.loss_weight_size() == 0) {
    param_.add_loss_weight(1.0f);
    for (size_t i = 1; i < top.size(); ++i) param_.add_loss_weight(0.0f);
  }

  caffe::LayerParameter softmax_param;
  softmax_param.set_name(name() + "/softmax");
  softmax_param.set_type("Softmax");
  softmax_param.mutable_softmax_param()->set_axis(param_.infogain_loss_param().axis());
  softmax_ = CreateLayer(softmax_param, ctx_);
  softmax_->Initialize({bottom[0]}, {&prob_});

  const auto& p = param_.loss_param();
  if (p.has_normalize()) {
    // Caffe's infogain_loss_layer.cpp refuses the deprecated flag outright.
    CORTADO_THROW(kInvalidArgument,
                  "{}: loss_param.normalize is deprecated for this layer; use "
                  "loss_param.normalization",
                  Describe());
  }
  normalization_ = p.normalization();
  has_ignore_label_ = p.has_ignore_label();
  ignore_label_ = p.ignore_label();

  if (bottom.size() < 3) {
    const auto& ip = param_.infogain_loss_param();
    if (!ip.has_source()) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: the infogain matrix H must come from a third bottom or from "
                    "infogain_loss_param.source; neither is given",
                    Describe());
    }
    try {
      caffe::BlobProto proto;
      io::ReadProtoFromBinaryFile(ip.source(), &proto);
      infogain_.FromProto(proto);
    } catch (const Error& e) {
      // Keep the reader's code (kNotFound, kIo, ...) and name the layer.
      throw Error(e.code(),
                  fmt::format("{}: infogain matrix H (infogain_loss_param.source '{}'): {}",
                              Describe(), ip.source(), e.what()),
                  e.file(), e.line());
    }
  }
}

void InfogainLossLayer::Reshape(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  const ClassAxis split =
      SplitAtClassAxis(Describe(), *bottom[0], *bottom[1], param_.infogain_loss_param().axis(),
                       /*same_first_axis=*/true);
  softmax_->Reshape({bottom[0]}, {&prob_});
  outer_num_ = split.outer;
  num_labels_ = split.classes;
  inner_num_ = split.inner;
  const Tensor& h = Infogain(bottom);
  if (static_cast<int64_t>(h.count()) !=
      static_cast<int64_t>(num_labels_) * static_cast<int64_t>(num_labels_)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the infogain matrix H must be {} x {} for {} classes, got shape {}",
                  Describe(), num_labels_, num_labels_, num_labels_, h.ShapeString());
  }
  sum_rows_h_.Reshape(std::vector<int>{num_labels_});
  top[0]->Reshape(std::vector<int>{});
  if (top.size() >= 2) top[1]->ReshapeLike(*bottom[0]);
}

float InfogainLossLayer::Normalizer(int valid_count) const {
  return LossNormalizer(normalization_, outer_num_, inner_num_, valid_count);
}

void InfogainLossLayer::ThrowBadLabel(int label, int index) const {
  CORTADO_THROW(kInvalidArgument, "{}: label value {} at position {} is outside [0, {})",
                Describe(), label, index, num_labels_);
}

int InfogainLossLayer::LabelAt(const float* labels, int index) const {
  const int label = static_cast<int>(labels[index]);
  if (Ignored(label)) return label;
  if (label < 0 || label >= num_labels_) ThrowBadLabel(label, index);
  return label;
}

void InfogainLossLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                   const std::vector<Tensor*>& top) {
  softmax_->Forward({bottom[0]}, {&prob_});
  const float* prob = prob_.cpu_data();
  const float* labels = bottom[1]->cpu_data();
  const float* h = Infogain(bottom).cpu_data();
  const int k = num_labels_;
  const int64_t dim = static_cast<int64_t>(k) * inner_num_;
  double loss = 0.0;
  int valid_count = 0;
  for (int i = 0; i < outer_num_; ++i) {
    for (int j = 0; j < inner_num_; ++j) {
      const int label = LabelAt(labels, i * inner_num_ + j);
      if (Ignored(label)) continue;
      const float* row = h + static_cast<int64_t>(label) * k;
      for (int c = 0; c < k; ++c) {
        const float q = prob[i * dim + static_cast<int64_t>(c) * inner_num_ + j];
        loss -= row[c] * std::log(std::max(q, kLogThreshold));
      }
      ++valid_count;
    }
  }
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss) / Normalizer(valid_count);
  if (top.size() == 2) math::Copy(prob_.count(), prob, top[1]->mutable_cpu_data());
}

void InfogainLossLayer::CheckBackward(const std::vector<bool>& propagate_down) const {
  if (propagate_down[1]) {
    CORTADO_THROW(kInvalidArgument, "{} cannot backpropagate to its label input (bottom 1)",
                  Describe());
  }
  if (propagate_down.size() > 2 && propagate_down[2]) {
    CORTADO_THROW(kInvalidArgument,
                  "{} cannot backpropagate to its infogain matrix input (bottom 2)", Describe());
  }
}

void InfogainLossLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                    const std::vector<bool>& propagate_down,
                                    const std::vector<Tensor*>& bottom) {
  CheckBackward(propagate_down);
  if (!propagate_down[0]) return;
  const int k = num_labels_;
  // H may be an input that changes between passes: its row sums are taken afresh each time.
  const float* h = Infogain(bottom).cpu_data();
  float* sum_rows = sum_rows_h_.mutable_cpu_data();
  for (int r = 0; r < k; ++r) {
    float sum = 0.0f;
    for (int c = 0; c < k; ++c) sum += h[static_cast<int64_t>(r) * k + c];
    sum_rows[r] = sum;
  }
  const float* prob = prob_.cpu_data();
  const float* labels = bottom[1]->cpu_data();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int64_t dim = static_cast<int64_t>(k) * inner_num_;
  int valid_count = 0;
  for (int i = 0; i < outer_num_; ++i) {
    for (int j = 0; j < inner_num_; ++j) {
      const int label = LabelAt(labels, i * inner_num_ + j);
      const bool ignored = Ignored(label);
      for (int c = 0; c < k; ++c) {
        const int64_t idx = i * dim + static_cast<int64_t>(c) * inner_num_ + j;
        dx[idx] =
            ignored ? 0.0f : prob[idx] * sum_rows[label] - h[static_cast<int64_t>(label) * k + c];
      }
      if (!ignored) ++valid_count;
    }
  }
  math::Scale(prob_.count(), top[0]->cpu_diff()[0] / Normalizer(valid_count), dx);
}

CORTADO_REGISTER_LAYER(InfogainLoss, InfogainLossLayer);

}  // namespace cortado
