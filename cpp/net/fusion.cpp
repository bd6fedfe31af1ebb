// SPDX-License-Identifier: Apache-2.0
// The fusion pass of a Net (net.hpp): BatchNorm + Scale (+ ReLU) chains and Eltwise SUM + ReLU
// pairs computed by their first layer, the Splits of those sums' outputs folded into them, and
// residual sums computed by the BatchNorm chain before them.
#include <cstring>
#include <string>

#include "layers/batch_norm_layer.hpp"
#include "layers/eltwise_layer.hpp"
#include "layers/scale_layer.hpp"
#include "net/net.hpp"

namespace cortado {

std::string Net::BatchNormInputName(const std::string& name) { return name + " (BatchNorm input)"; }

bool Net::FusableInPlace(int i, int blob, const char* type) const {
  return i < static_cast<int>(layers_.size()) && std::string(layers_[i]->type()) == type &&
         bottom_ids_[i].size() == 1 && top_ids_[i].size() == 1 && bottom_ids_[i][0] == blob &&
         top_ids_[i][0] == blob && layers_[i]->layer_param().propagate_down_size() == 0 &&
         layers_[i]->loss(0) == 0.0f && layers_[i]->fused_into() == nullptr;
}

int Net::FuseBatchNormChains() {
  const int num_layers = static_cast<int>(layers_.size());
  auto in_place_on = [&](int i, int blob, const char* type) {
    return FusableInPlace(i, blob, type);
  };
  int fused = 0;
  for (int i = 0; i < num_layers; ++i) {
    if (top_ids_[i].size() != 1) continue;
    const int blob = top_ids_[i][0];
    if (!in_place_on(i, blob, "BatchNorm") || !in_place_on(i + 1, blob, "Scale")) continue;
    auto* scale = dynamic_cast<ScaleLayer*>(layers_[i + 1].get());
    if (scale == nullptr || !scale->ScalesChannels()) continue;
    const bool relu = in_place_on(i + 2, blob, "ReLU") &&
                      layers_[i + 2]->layer_param().relu_param().negative_slope() >= 0.0f;
    auto* bn = static_cast<BatchNormLayer*>(layers_[i].get());
    bn->FuseScale(scale, layer_need_backward_[i + 1], relu,
                  relu ? layers_[i + 2]->layer_param().relu_param().negative_slope() : 0.0f);
    scale->set_fused_into(bn);
    bool need_backward = layer_need_backward_[i] || layer_need_backward_[i + 1];
    if (relu) {
      layers_[i + 2]->set_fused_into(bn);
      need_backward = need_backward || layer_need_backward_[i + 2];
    }
    layer_need_backward_[i] = need_backward;
    ++fused;
  }
  return fused;
}

int Net::FuseEltwiseRelus() {
  int fused = 0;
  for (size_t i = 0; i + 1 < layers_.size(); ++i) {
    if (std::string(layers_[i]->type()) != "Eltwise" || top_ids_[i].size() != 1) continue;
    if (layers_[i]->layer_param().eltwise_param().operation() != caffe::EltwiseParameter::SUM ||
        layers_[i]->loss(0) != 0.0f) {
      continue;
    }
    const int next = static_cast<int>(i) + 1;
    if (!FusableInPlace(next, top_ids_[i][0], "ReLU")) continue;
    const float slope = layers_[next]->layer_param().relu_param().negative_slope();
    if (slope < 0.0f) continue;
    static_cast<EltwiseLayer*>(layers_[i].get())->FuseRelu(slope);
    layers_[next]->set_fused_into(layers_[i].get());
    layer_need_backward_[i] = layer_need_backward_[i] || layer_need_backward_[next];
    ++fused;
  }
  return fused;
}

int Net::FoldSplitsIntoSums() {
  const int num_layers = static_cast<int>(layers_.size());
  int folded = 0;
  for (int s = 1; s < num_layers; ++s) {
    if (std::strcmp(layers_[s]->type(), "Split") != 0 || top_ids_[s].size() != 2 ||
        !layer_need_backward_[s] || !bottom_need_backward_[s][0] ||
        layers_[s]->fused_into() != nullptr) {
      continue;
    }
    // The layer whose passes compute the Split's bottom: the last one before the Split, unless
    // that one is fused into another (an in-place ReLU into its sum). A sum of two: its backward
    // is one element-wise pass on every device, which the memory plan relies on (a sum of more
    // bottoms takes two passes on the GPU, the second reading what the first may have written).
    int host = s - 1;
    const Layer* fused_host = layers_[host]->fused_into();
    while (fused_host != nullptr && host > 0 && layers_[host].get() != fused_host) --host;
    if (layers_[host]->fused_into() != nullptr ||
        std::strcmp(layers_[host]->type(), "Eltwise") != 0 || bottom_ids_[host].size() != 2 ||
        top_ids_[host].size() != 1 || top_ids_[host][0] != bottom_ids_[s][0] ||
        layers_[host]->loss(0) != 0.0f) {
      continue;
    }
    bool chain = true;  // every layer between them fused into the host
    for (int j = host + 1; j < s; ++j) {
      chain = chain && layers_[j]->fused_into() == layers_[host].get();
    }
    auto* sum = static_cast<EltwiseLayer*>(layers_[host].get());
    if (!chain || sum->layer_param().eltwise_param().operation() != caffe::EltwiseParameter::SUM ||
        sum->sums_top_diffs() || blob_loss_weights_[top_ids_[s][0]] != 0.0f ||
        blob_loss_weights_[top_ids_[s][1]] != 0.0f) {
      continue;
    }
    sum->SumTopDiffs(top_vecs_[s][0], top_vecs_[s][1]);
    layers_[s]->set_fused_into(sum);
    layer_need_backward_[host] = layer_need_backward_[host] || layer_need_backward_[s];
    ++folded;
  }
  return folded;
}

int Net::FoldSumsIntoBatchNorms(bool keep_inputs) {
  const int num_layers = static_cast<int>(layers_.size());
  int folded = 0;
  for (int i = 0; i + 2 < num_layers; ++i) {
    if (std::strcmp(layers_[i]->type(), "BatchNorm") != 0 || layers_[i]->fused_into() != nullptr) {
      continue;
    }
    auto* bn = static_cast<BatchNormLayer*>(layers_[i].get());
    const int blob = bottom_ids_[i][0];
    const int k = i + 2;  // the sum, right after the chain's Scale (a ReLU there: not a sum)
    if (!bn->fused_scale() || top_ids_[i][0] != blob || layers_[i + 1]->fused_into() != bn ||
        std::strcmp(layers_[k]->type(), "Eltwise") != 0 || layers_[k]->fused_into() != nullptr ||
        bottom_ids_[k].size() != 2 || top_ids_[k].size() != 1 || layers_[k]->loss(0) != 0.0f ||
        blob_loss_weights_[blob] != 0.0f) {
      continue;
    }
    auto* sum = static_cast<EltwiseLayer*>(layers_[k].get());
    const int chain = bottom_ids_[k][0] == blob ? 0 : 1;
    const int residual = 1 - chain;
    if (!sum->plain_sum() || bottom_ids_[k][chain] != blob || bottom_ids_[k][residual] == blob) {
      continue;
    }
    // Backward alike: both run it or neither, and then the sum propagates to both bottoms.
    const bool backward = layer_need_backward_[i];
    if (backward != layer_need_backward_[k] ||
        (backward && (!bottom_need_backward_[k][0] || !bottom_need_backward_[k][1]))) {
      continue;
    }
    // The sum alone reads the chain's output.
    bool alone = true;
    for (int j = k + 1; j < num_layers && alone; ++j) {
      for (int b : bottom_ids_[j]) alone = alone && b != blob;
      for (int t : top_ids_[j]) alone = alone && t != blob;
    }
    if (!alone) continue;
    bn->FoldSum(sum, bottom_vecs_[k], top_vecs_[k], residual);
    bottom_ids_[i].push_back(bottom_ids_[k][residual]);
    bottom_vecs_[i].push_back(bottom_vecs_[k][residual]);
    bottom_need_backward_[i].push_back(bottom_need_backward_[k][residual]);
    top_ids_[i][0] = top_ids_[k][0];
    top_vecs_[i][0] = top_vecs_[k][0];
    // The chain's blob now only ever holds its input: named so, and its old name explained.
    const std::string name = blob_names_[blob];
    const std::string input_name = BatchNormInputName(name);
    if (blob_index_.count(input_name) == 0) {
      blob_names_[blob] = input_name;
      blob_index_[input_name] = blob;
      blob_index_.erase(name);
      folded_blobs_[name] = layers_[k]->name();
    }
    for (int j = k + 1; j < num_layers && layers_[j]->fused_into() == sum; ++j) {
      layers_[j]->set_fused_into(bn);
    }
    sum->set_fused_into(bn);
    if (keep_inputs) bn->KeepInput();
    bn->Reshape(bottom_vecs_[i], top_vecs_[i]);
    RecordShapes(i);
    ++folded;
  }
  return folded;
}

int Net::KeepBatchNormInputs(std::map<std::string, int>* available) {
  const int num_layers = static_cast<int>(layers_.size());
  int kept = 0;
  for (int i = 0; i < num_layers; ++i) {
    if (std::strcmp(layers_[i]->type(), "BatchNorm") != 0 || !layer_need_backward_[i]) continue;
    auto* bn = static_cast<BatchNormLayer*>(layers_[i].get());
    const int input = bottom_ids_[i][0];
    if (!bn->fused_scale() || top_ids_[i][0] != input) continue;
    const std::string name = blob_names_[input];
    const std::string input_name = BatchNormInputName(name);
    if (blob_index_.count(input_name) != 0) continue;
    // Layers whose tops share the input's data (a Split of the chain's output, a Flatten of
    // that): set up again below, so that they share the new top's instead.
    std::vector<int> aliasing;
    for (int j = i + 1; j < num_layers; ++j) {
      for (const Tensor* t : top_vecs_[j]) {
        if (t != blobs_[input].get() && t->data() == blobs_[input]->data()) {
          aliasing.push_back(j);
          break;
        }
      }
    }
    auto blob = std::make_shared<Tensor>();
    blob->ReshapeLike(*blobs_[input]);
    const int output = static_cast<int>(blobs_.size());
    blobs_.push_back(blob);
    blob_names_.push_back(name);
    blob_need_backward_.push_back(blob_need_backward_[input]);
    if (blob_loss_weights_.size() < blobs_.size()) blob_loss_weights_.resize(blobs_.size(), 0.0f);
    blob_loss_weights_[output] = blob_loss_weights_[input];
    blob_names_[input] = input_name;
    blob_index_[input_name] = input;
    blob_index_[name] = output;
    for (int j = i; j < num_layers; ++j) {
      for (size_t t = 0; t < top_ids_[j].size(); ++t) {
        if (top_ids_[j][t] != input) continue;
        top_ids_[j][t] = output;
        top_vecs_[j][t] = blob.get();
      }
      if (j == i) continue;
      for (size_t b = 0; b < bottom_ids_[j].size(); ++b) {
        if (bottom_ids_[j][b] != input) continue;
        bottom_ids_[j][b] = output;
        bottom_vecs_[j][b] = blob.get();
      }
      // A sum folded into a later BatchNorm (FoldSumsIntoBatchNorms, run before this) whose
      // other bottom is this chain's output: the BatchNorm holds the sum's blobs too.
      if (std::strcmp(layers_[j]->type(), "BatchNorm") == 0) {
        static_cast<BatchNormLayer*>(layers_[j].get())
            ->ReplaceSumBlob(blobs_[input].get(), blob.get());
      }
    }
    for (auto& [blob_name, id] : *available) {
      if (id == input) id = output;
    }
    bn->KeepInput();
    bn->Reshape(bottom_vecs_[i], top_vecs_[i]);
    for (int j : aliasing) layers_[j]->Reshape(bottom_vecs_[j], top_vecs_[j]);
    ++kept;
  }
  return kept;
}

}  // namespace cortado
