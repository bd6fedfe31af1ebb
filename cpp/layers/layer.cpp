// SPDX-License-Identifier: Apache-2.0
#include "layers/layer.hpp"

#include <cstdlib>
#include <string>

#include "core/logging.hpp"

namespace cortado {

Layer::Layer(const caffe::LayerParameter& param, Context* ctx) : param_(param), ctx_(ctx) {
  CORTADO_CHECK(ctx_ != nullptr, "layer '{}' created without a context", param.name());
}

HalfType Layer::HalfTensors() const {
  if (!TakesHalfTensors() || !ctx_->device().is_cuda()) return HalfType::kNone;
  const char* value = std::getenv("CORTADO_HALF_TENSORS");
  return value != nullptr && std::string(value) == "0" ? HalfType::kNone : ctx_->half_compute();
}

std::string Layer::Describe() const { return fmt::format("layer '{}' ({})", name(), type()); }

void Layer::CheckBlobCounts(const std::vector<Tensor*>& bottom,
                            const std::vector<Tensor*>& top) const {
  const int nb = static_cast<int>(bottom.size());
  const int nt = static_cast<int>(top.size());
  auto fail = [&](const std::string& what) {
    CORTADO_THROW(kInvalidArgument, "{} {}; it has {} bottom(s) and {} top(s)", Describe(), what,
                  nb, nt);
  };
  if (ExactNumBottomBlobs() >= 0 && nb != ExactNumBottomBlobs())
    fail(fmt::format("takes {} bottom blob(s)", ExactNumBottomBlobs()));
  if (MinBottomBlobs() >= 0 && nb < MinBottomBlobs())
    fail(fmt::format("takes at least {} bottom blob(s)", MinBottomBlobs()));
  if (MaxBottomBlobs() >= 0 && nb > MaxBottomBlobs())
    fail(fmt::format("takes at most {} bottom blob(s)", MaxBottomBlobs()));
  if (ExactNumTopBlobs() >= 0 && nt != ExactNumTopBlobs())
    fail(fmt::format("produces {} top blob(s)", ExactNumTopBlobs()));
  if (MinTopBlobs() >= 0 && nt < MinTopBlobs())
    fail(fmt::format("produces at least {} top blob(s)", MinTopBlobs()));
  if (MaxTopBlobs() >= 0 && nt > MaxTopBlobs())
    fail(fmt::format("produces at most {} top blob(s)", MaxTopBlobs()));
  if (EqualNumBottomTopBlobs() && nb != nt) fail("needs as many tops as bottoms");
}

void Layer::Initialize(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  CheckBlobCounts(bottom, top);
  Setup(bottom, top);
  if (param_propagate_down_.size() < blobs_.size()) {
    param_propagate_down_.resize(blobs_.size(), true);
  }
  Reshape(bottom, top);
  SetLossWeights(top);
}

void Layer::SetLossWeights(const std::vector<Tensor*>& top) {
  const int num_weights = param_.loss_weight_size();
  if (num_weights == 0) return;
  if (num_weights != static_cast<int>(top.size())) {
    CORTADO_THROW(kInvalidArgument, "{} has {} loss_weight value(s) for {} top(s)", Describe(),
                  num_weights, top.size());
  }
  for (int i = 0; i < num_weights; ++i) {
    const float weight = param_.loss_weight(i);
    if (weight == 0.0f) continue;
    set_loss(i, weight);
    // The top's diff holds the loss weight, so Backward scales gradients by it (Caffe's trick).
    Tensor* t = top[i];
    float* diff = t->mutable_cpu_diff();
    for (int j = 0; j < t->count(); ++j) diff[j] = weight;
  }
}

void Layer::set_loss(int top_index, float value) {
  if (static_cast<int>(loss_.size()) <= top_index) loss_.resize(top_index + 1, 0.0f);
  loss_[top_index] = value;
}

void Layer::set_param_propagate_down(int index, bool value) {
  if (static_cast<int>(param_propagate_down_.size()) <= index) {
    param_propagate_down_.resize(index + 1, true);
  }
  param_propagate_down_[index] = value;
}

float Layer::Forward(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  if (fused_into_ != nullptr) return 0.0f;  // the net fuses only layers without loss weights
  if (ctx_->device().is_cuda()) {
    ForwardGpu(bottom, top);
  } else {
    ForwardCpu(bottom, top);
  }
  float loss = 0.0f;
  for (int i = 0; i < static_cast<int>(top.size()); ++i) {
    const float weight = this->loss(i);
    if (weight == 0.0f) continue;
    const Tensor* t = top[i];
    const float* data = t->cpu_data();
    const float* diff = t->cpu_diff();
    for (int j = 0; j < t->count(); ++j) loss += data[j] * diff[j];
  }
  return loss;
}

void Layer::RecomputeTops(const std::vector<Tensor*>& /*top*/) {
  CORTADO_THROW(kInternal, "{} cannot recompute its tops", Describe());
}

void Layer::Backward(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                     const std::vector<Tensor*>& bottom) {
  if (fused_into_ != nullptr) return;
  if (ctx_->device().is_cuda()) {
    BackwardGpu(top, propagate_down, bottom);
  } else {
    BackwardCpu(top, propagate_down, bottom);
  }
}

void Layer::ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  CORTADO_LOG_WARN_ONCE("{} has no GPU forward; running it on the CPU through host copies", type());
  ForwardCpu(bottom, top);
}

void Layer::BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                        const std::vector<Tensor*>& bottom) {
  CORTADO_LOG_WARN_ONCE("{} has no GPU backward; running it on the CPU through host copies",
                        type());
  BackwardCpu(top, propagate_down, bottom);
}

void Layer::ToProto(caffe::LayerParameter* proto, bool write_diff) const {
  proto->Clear();
  proto->CopyFrom(param_);
  proto->clear_blobs();
  for (const auto& blob : blobs_) blob->ToProto(proto->add_blobs(), write_diff);
}

std::unique_ptr<Layer> CreateLayer(const caffe::LayerParameter& param, Context* ctx) {
  if (param.type() == "Python") {
    // Caffe runs these through an embedded interpreter; Cortado has none by design.
    const caffe::PythonParameter& py = param.python_param();
    CORTADO_THROW(kUnimplemented,
                  "layer '{}' (Python): Cortado runs no Python layers (python_param module '{}', "
                  "layer '{}'); replace it with a built-in layer type or an input fed from Spark",
                  param.name(), py.module(), py.layer());
  }
  try {
    return LayerRegistry::Get().Create(param.type(), "layer type", param, ctx);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument || LayerRegistry::Get().Has(param.type())) throw;
    CORTADO_THROW(kInvalidArgument, "layer '{}': {}", param.name(), e.what());
  }
}

}  // namespace cortado
