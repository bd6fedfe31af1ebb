// SPDX-License-Identifier: Apache-2.0
// Building a net from its NetParameter: the phase's layers by Caffe's include/exclude rules,
// split layers inserted, each layer set up with its bottoms, tops and parameters, the memory
// plan, fusion and the learnable-parameter tables; lookups by name. Running the net is in
// net_run.cpp, its weights' input and output in net_weights.cpp.
#include "net/net.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/logging.hpp"
#include "io/proto_io.hpp"
#include "layers/batch_norm_layer.hpp"
#include "net/insert_splits.hpp"

namespace cortado {

bool NonFiniteAllowed() {
  const char* value = std::getenv("CORTADO_ALLOW_NONFINITE_LOSS");
  return value != nullptr && std::string(value) != "0" && std::string(value) != "";
}

namespace {

std::string ShapesOf(const std::vector<Tensor*>& tensors, const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!out.empty()) out += ", ";
    out += fmt::format("'{}' [{}]", i < names.size() ? names[i] : "?", tensors[i]->ShapeString());
  }
  return out.empty() ? "none" : out;
}

}  // namespace

Net::Net(const caffe::NetParameter& param, Context* ctx, const NetOptions& options)
    : ctx_(ctx), options_(options) {
  CORTADO_CHECK(ctx_ != nullptr);
  Init(param);
}

Net::Net(const std::string& path, caffe::Phase phase, Context* ctx, int level,
         const std::vector<std::string>& stages, const NetOptions& options)
    : ctx_(ctx), options_(options) {
  CORTADO_CHECK(ctx_ != nullptr);
  caffe::NetParameter param = io::ReadNetParameterFromTextFile(path);
  param.mutable_state()->set_phase(phase);
  param.mutable_state()->set_level(level);
  for (const auto& stage : stages) param.mutable_state()->add_stage(stage);
  Init(param);
}

bool Net::StateMeetsRule(const caffe::NetState& state, const caffe::NetStateRule& rule) {
  if (rule.has_phase() && rule.phase() != state.phase()) return false;
  if (rule.has_min_level() && state.level() < rule.min_level()) return false;
  if (rule.has_max_level() && state.level() > rule.max_level()) return false;
  const std::set<std::string> stages(state.stage().begin(), state.stage().end());
  for (const auto& stage : rule.stage()) {
    if (!stages.count(stage)) return false;
  }
  for (const auto& stage : rule.not_stage()) {
    if (stages.count(stage)) return false;
  }
  return true;
}

caffe::NetParameter Net::FilterNet(const caffe::NetParameter& param) {
  caffe::NetParameter out = param;
  out.clear_layer();
  for (const auto& layer : param.layer()) {
    if (layer.include_size() > 0 && layer.exclude_size() > 0) {
      CORTADO_THROW(kInvalidArgument,
                    "layer '{}' ({}) has both include and exclude rules; use one of them",
                    layer.name(), layer.type());
    }
    // Included if any include rule matches (or there is none) and no exclude rule matches.
    bool keep = layer.include_size() == 0;
    for (const auto& rule : layer.exclude()) {
      if (StateMeetsRule(param.state(), rule)) keep = false;
    }
    for (const auto& rule : layer.include()) {
      if (StateMeetsRule(param.state(), rule)) keep = true;
    }
    if (keep) *out.add_layer() = layer;
  }
  return out;
}

std::string Net::DescribeLayer(int layer_id) const {
  return fmt::format("layer '{}' ({})", layer_names_[layer_id], layers_[layer_id]->type());
}

void Net::Init(const caffe::NetParameter& in_param) {
  caffe::NetParameter filtered = FilterNet(in_param);
  caffe::NetParameter param = InsertSplits(filtered);
  name_ = param.name();
  phase_ = param.state().phase();
  std::map<std::string, int> available;  // blobs produced and not yet consumed
  const int num_layers = param.layer_size();
  bottom_vecs_.resize(num_layers);
  bottom_ids_.resize(num_layers);
  bottom_need_backward_.resize(num_layers);
  top_vecs_.resize(num_layers);
  top_ids_.resize(num_layers);
  param_id_vecs_.resize(num_layers);
  std::set<std::string> layer_names_seen;

  for (int layer_id = 0; layer_id < num_layers; ++layer_id) {
    caffe::LayerParameter* layer_param = param.mutable_layer(layer_id);
    if (!layer_param->has_phase()) layer_param->set_phase(phase_);
    if (!layer_names_seen.insert(layer_param->name()).second) {
      CORTADO_LOG_WARN("net '{}' has two layers named '{}'", name_, layer_param->name());
    }
    if (layer_param->propagate_down_size() > 0 &&
        layer_param->propagate_down_size() != layer_param->bottom_size()) {
      CORTADO_THROW(kInvalidArgument,
                    "layer '{}' ({}): propagate_down has {} entries for {} bottom(s)",
                    layer_param->name(), layer_param->type(), layer_param->propagate_down_size(),
                    layer_param->bottom_size());
    }
    layers_.push_back(CreateLayer(*layer_param, ctx_));
    layer_names_.push_back(layer_param->name());
    layer_index_.emplace(layer_param->name(), layer_id);
    Layer* layer = layers_.back().get();

    bool need_backward = false;
    for (int bottom_id = 0; bottom_id < layer_param->bottom_size(); ++bottom_id) {
      AppendBottom(param, layer_id, bottom_id, &available);
      need_backward |= blob_need_backward_[bottom_ids_[layer_id][bottom_id]];
    }
    for (int top_id = 0; top_id < layer_param->top_size(); ++top_id) {
      AppendTop(param, layer_id, top_id, &available);
      if (layer_param->type() == "Input")
        input_blobs_.push_back(blobs_[top_ids_[layer_id][top_id]].get());
    }
    // Layers such as losses may produce tops the prototxt does not name.
    if (layer->AutoTopBlobs()) {
      const int needed = std::max(layer->MinTopBlobs(), layer->ExactNumTopBlobs());
      for (int top_id = layer_param->top_size(); top_id < needed; ++top_id) {
        AppendTop(param, layer_id, -1, &available);
      }
    }

    std::vector<std::string> bottom_names(layer_param->bottom().begin(),
                                          layer_param->bottom().end());
    WithContext(
        fmt::format("{}: setting up {} with bottoms {}", name_.empty() ? "net" : name_,
                    DescribeLayer(layer_id), ShapesOf(bottom_vecs_[layer_id], bottom_names)),
        [&] { layer->Initialize(bottom_vecs_[layer_id], top_vecs_[layer_id]); });
    RecordShapes(layer_id);
    // A top of more than the host memory tensors may hold is refused here, naming the layer,
    // rather than when it is first used: a shape the machine cannot hold is a setting to fix
    // (kInvalidArgument), not a failure to retry.
    for (size_t top_id = 0; top_id < top_vecs_[layer_id].size(); ++top_id) {
      const Tensor* top = top_vecs_[layer_id][top_id];
      const double bytes = 2.0 * sizeof(float) * static_cast<double>(top->count());  // data, diff
      if (bytes > static_cast<double>(HostMemoryLimit())) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: {}: top '{}' has shape {}, which needs {:.0f} bytes (data and diff), "
                      "more than the {} bytes of host memory tensors may hold",
                      name_.empty() ? "net" : name_, DescribeLayer(layer_id),
                      blob_names_[top_ids_[layer_id][top_id]], top->ShapeString(), bytes,
                      HostMemoryLimit());
      }
    }
    for (int top_id = 0; top_id < static_cast<int>(top_vecs_[layer_id].size()); ++top_id) {
      const int blob_id = top_ids_[layer_id][top_id];
      if (static_cast<int>(blob_loss_weights_.size()) <= blob_id) {
        blob_loss_weights_.resize(blob_id + 1, 0.0f);
      }
      blob_loss_weights_[blob_id] = layer->loss(top_id);
      CORTADO_LOG_DEBUG("Top shape: {} {}", blob_names_[blob_id],
                        top_vecs_[layer_id][top_id]->ShapeString());
    }

    const int num_params = static_cast<int>(layer->blobs().size());
    if (layer_param->param_size() > num_params) {
      CORTADO_THROW(kInvalidArgument, "{} has {} param specs but only {} parameter blob(s)",
                    DescribeLayer(layer_id), layer_param->param_size(), num_params);
    }
    for (int param_id = 0; param_id < num_params; ++param_id) {
      const bool has_spec = param_id < layer_param->param_size();
      const float lr_mult = has_spec ? layer_param->param(param_id).lr_mult() : 1.0f;
      const bool param_need_backward = lr_mult != 0.0f;
      need_backward |= param_need_backward;
      layer->set_param_propagate_down(param_id, param_need_backward);
    }
    for (int param_id = 0; param_id < num_params; ++param_id) {
      AppendParam(param, layer_id, param_id);
    }
    layer_need_backward_.push_back(need_backward);
    if (need_backward) {
      for (int blob_id : top_ids_[layer_id]) blob_need_backward_[blob_id] = true;
    }
  }

  // Walk backwards: a layer needs backward only if some loss depends on its output.
  std::set<std::string> blobs_under_loss;
  std::set<std::string> blobs_skip_backward;
  for (int layer_id = num_layers - 1; layer_id >= 0; --layer_id) {
    bool contributes_loss = false;
    bool skip_backward = true;
    Layer* layer = layers_[layer_id].get();
    for (int top_id = 0; top_id < static_cast<int>(top_vecs_[layer_id].size()); ++top_id) {
      const std::string& blob_name = blob_names_[top_ids_[layer_id][top_id]];
      if (layer->loss(top_id) != 0.0f || blobs_under_loss.count(blob_name)) {
        contributes_loss = true;
      }
      if (!blobs_skip_backward.count(blob_name)) skip_backward = false;
      if (contributes_loss && !skip_backward) break;
    }
    if (layer_need_backward_[layer_id] && skip_backward) {
      layer_need_backward_[layer_id] = false;
      for (size_t b = 0; b < bottom_vecs_[layer_id].size(); ++b) {
        bottom_need_backward_[layer_id][b] = false;
      }
    }
    if (!contributes_loss) layer_need_backward_[layer_id] = false;
    for (size_t b = 0; b < bottom_vecs_[layer_id].size(); ++b) {
      const std::string& blob_name = blob_names_[bottom_ids_[layer_id][b]];
      if (contributes_loss) {
        blobs_under_loss.insert(blob_name);
      } else {
        bottom_need_backward_[layer_id][b] = false;
      }
      if (!bottom_need_backward_[layer_id][b]) blobs_skip_backward.insert(blob_name);
    }
  }
  if (param.force_backward()) {
    for (int layer_id = 0; layer_id < num_layers; ++layer_id) {
      layer_need_backward_[layer_id] = true;
      for (size_t b = 0; b < bottom_vecs_[layer_id].size(); ++b) {
        const bool allowed = layers_[layer_id]->AllowForceBackward(static_cast<int>(b));
        bottom_need_backward_[layer_id][b] = bottom_need_backward_[layer_id][b] || allowed;
        blob_need_backward_[bottom_ids_[layer_id][b]] =
            blob_need_backward_[bottom_ids_[layer_id][b]] || bottom_need_backward_[layer_id][b];
      }
      for (int param_id = 0; param_id < static_cast<int>(layers_[layer_id]->blobs().size());
           ++param_id) {
        layers_[layer_id]->set_param_propagate_down(param_id, true);
      }
    }
  }
  if (options_.fuse) {
    const int chains = FuseBatchNormChains();
    const int sums = FuseEltwiseRelus();
    const int splits = options_.fold_splits ? FoldSplitsIntoSums() : 0;
    using BatchNormInputs = NetOptions::BatchNormInputs;
    const bool keep_inputs =
        options_.keep_batch_norm_inputs == BatchNormInputs::kAlways ||
        (options_.keep_batch_norm_inputs == BatchNormInputs::kOnGpus && ctx_->device().is_cuda());
    // Not in TEST nets: they only run forward (Solver, `cortado test`), where the copy is not
    // kept anyway and the top in place costs no memory.
    const bool keep = keep_inputs && phase_ == caffe::TRAIN;
    using SumFolds = NetOptions::SumFolds;
    const bool fold_sums =
        options_.fold_sums_into_batch_norms == SumFolds::kAlways ||
        (options_.fold_sums_into_batch_norms == SumFolds::kTrainNets && phase_ == caffe::TRAIN);
    const int folded_sums = fold_sums ? FoldSumsIntoBatchNorms(keep) : 0;
    const int inputs = keep ? KeepBatchNormInputs(&available) : 0;
    if (chains + sums + splits > 0) {
      CORTADO_LOG_DEBUG(
          "net '{}': fused {} BatchNorm + Scale chains ({} keeping their input), {} Eltwise + "
          "ReLU pairs, {} Splits into sums, {} sums into BatchNorms",
          name_, chains, inputs, sums, splits, folded_sums);
    }
  }
  DropUnneededBackwardState();
  // Blobs produced and never consumed are the net's outputs.
  for (const auto& [blob_name, blob_id] : available) {
    output_blobs_.push_back(blobs_[blob_id].get());
    output_blob_indices_.push_back(blob_id);
  }
  KeepHalfTensors();
  KeepBlockedTensors();
  FlattenParamDiffs();
  CORTADO_LOG_DEBUG("net '{}' ({}) built: {} layers, {} blobs, {} learnable params", name_,
                    caffe::Phase_Name(phase_), layers_.size(), blobs_.size(),
                    learnable_params_.size());
}
void Net::DropUnneededBackwardState() {
  // A BatchNorm that never runs backward need not keep its normalised copy.
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layer_need_backward_[i] && std::string(layers_[i]->type()) == "BatchNorm") {
      static_cast<BatchNormLayer*>(layers_[i].get())->DropBackwardState();
    }
  }
}

void Net::SetForwardOnly() {
  std::fill(layer_need_backward_.begin(), layer_need_backward_.end(), false);
  for (auto& need : bottom_need_backward_) std::fill(need.begin(), need.end(), false);
  DropUnneededBackwardState();
}

void Net::AppendTop(const caffe::NetParameter& param, int layer_id, int top_id,
                    std::map<std::string, int>* available) {
  const caffe::LayerParameter& layer_param = param.layer(layer_id);
  const std::string blob_name = (top_id >= 0 && top_id < layer_param.top_size())
                                    ? layer_param.top(top_id)
                                    : fmt::format("(automatic top {})", top_vecs_[layer_id].size());
  const bool in_place =
      top_id >= 0 && layer_param.bottom_size() > top_id && layer_param.bottom(top_id) == blob_name;
  if (in_place) {
    // The top is the bottom itself, computed in place.
    const int blob_id = blob_index_.at(blob_name);
    top_vecs_[layer_id].push_back(blobs_[blob_id].get());
    top_ids_[layer_id].push_back(blob_id);
    (*available)[blob_name] = blob_id;
    return;
  }
  if (top_id >= 0 && blob_index_.count(blob_name)) {
    CORTADO_THROW(kInvalidArgument,
                  "layer '{}' ({}): top '{}' is produced by an earlier layer too (tops may repeat "
                  "a name only in place, as the same layer's bottom at that index)",
                  layer_param.name(), layer_param.type(), blob_name);
  }
  auto blob = std::make_shared<Tensor>();
  const int blob_id = static_cast<int>(blobs_.size());
  blobs_.push_back(blob);
  blob_names_.push_back(blob_name);
  blob_need_backward_.push_back(false);
  blob_index_[blob_name] = blob_id;
  top_vecs_[layer_id].push_back(blob.get());
  top_ids_[layer_id].push_back(blob_id);
  (*available)[blob_name] = blob_id;
}

void Net::AppendBottom(const caffe::NetParameter& param, int layer_id, int bottom_id,
                       std::map<std::string, int>* available) {
  const caffe::LayerParameter& layer_param = param.layer(layer_id);
  const std::string& blob_name = layer_param.bottom(bottom_id);
  auto it = blob_index_.find(blob_name);
  if (it == blob_index_.end()) {
    CORTADO_THROW(kInvalidArgument,
                  "layer '{}' ({}): bottom '{}' (bottom index {}) is not produced by any earlier "
                  "layer",
                  layer_param.name(), layer_param.type(), blob_name, bottom_id);
  }
  const int blob_id = it->second;
  bottom_vecs_[layer_id].push_back(blobs_[blob_id].get());
  bottom_ids_[layer_id].push_back(blob_id);
  available->erase(blob_name);
  bool need_backward = blob_need_backward_[blob_id];
  if (layer_param.propagate_down_size() > 0) need_backward = layer_param.propagate_down(bottom_id);
  bottom_need_backward_[layer_id].push_back(need_backward);
}

void Net::AppendParam(const caffe::NetParameter& param, int layer_id, int param_id) {
  const caffe::LayerParameter& layer_param = param.layer(layer_id);
  const int num_specs = layer_param.param_size();
  const std::string param_name = param_id < num_specs ? layer_param.param(param_id).name() : "";
  const int net_param_id = static_cast<int>(params_.size());
  std::shared_ptr<Tensor> blob = layers_[layer_id]->blobs()[param_id];
  params_.push_back(blob);
  param_id_vecs_[layer_id].push_back(net_param_id);
  param_layer_indices_.emplace_back(layer_id, param_id);
  param_display_names_.push_back(
      param_name.empty() ? fmt::format("{}[{}]", layer_param.name(), param_id) : param_name);
  caffe::ParamSpec default_spec;
  const caffe::ParamSpec& spec = param_id < num_specs ? layer_param.param(param_id) : default_spec;
  auto owner_it =
      param_name.empty() ? param_names_index_.end() : param_names_index_.find(param_name);
  if (owner_it == param_names_index_.end()) {
    // This layer owns the parameter.
    if (!param_name.empty()) param_names_index_[param_name] = net_param_id;
    param_owners_.push_back(-1);
    learnable_param_ids_.push_back(net_param_id);
    learnable_params_.push_back(blob.get());
    params_lr_.push_back(spec.lr_mult());
    has_params_lr_.push_back(spec.has_lr_mult());
    params_weight_decay_.push_back(spec.decay_mult());
    has_params_decay_.push_back(spec.has_decay_mult());
    return;
  }
  // Shared: this layer's tensor takes the owner's data and diff.
  const int owner_id = owner_it->second;
  param_owners_.push_back(owner_id);
  Tensor* owner = params_[owner_id].get();
  const auto [owner_layer, owner_param] = param_layer_indices_[owner_id];
  const bool strict = spec.share_mode() != caffe::ParamSpec::PERMISSIVE;
  if (strict ? owner->shape() != blob->shape() : owner->count() != blob->count()) {
    CORTADO_THROW(kInvalidArgument,
                  "layer '{}' shares parameter '{}' with layer '{}', but its shape [{}] differs "
                  "from the owner's [{}]{}",
                  layer_param.name(), param_name, layer_names_[owner_layer], blob->ShapeString(),
                  owner->ShapeString(),
                  strict ? " (set share_mode: PERMISSIVE to match counts only)" : "");
  }
  blob->ShareData(*owner);
  blob->ShareDiff(*owner);
  const int learnable_id = static_cast<int>(
      std::find(learnable_param_ids_.begin(), learnable_param_ids_.end(), owner_id) -
      learnable_param_ids_.begin());
  if (spec.has_lr_mult()) {
    if (has_params_lr_[learnable_id] && params_lr_[learnable_id] != spec.lr_mult()) {
      CORTADO_THROW(kInvalidArgument,
                    "shared parameter '{}' has lr_mult {} in layer '{}' but {} in '{}'", param_name,
                    spec.lr_mult(), layer_param.name(), params_lr_[learnable_id],
                    layer_names_[owner_layer]);
    }
    has_params_lr_[learnable_id] = true;
    params_lr_[learnable_id] = spec.lr_mult();
  }
  if (spec.has_decay_mult()) {
    if (has_params_decay_[learnable_id] &&
        params_weight_decay_[learnable_id] != spec.decay_mult()) {
      CORTADO_THROW(kInvalidArgument,
                    "shared parameter '{}' has decay_mult {} in layer '{}' but {} in '{}'",
                    param_name, spec.decay_mult(), layer_param.name(),
                    params_weight_decay_[learnable_id], layer_names_[owner_layer]);
    }
    has_params_decay_[learnable_id] = true;
    params_weight_decay_[learnable_id] = spec.decay_mult();
  }
  (void)owner_param;
}

Tensor* Net::blob_by_name(const std::string& name) const {
  auto it = blob_index_.find(name);
  if (it == blob_index_.end()) {
    if (auto folded = folded_blobs_.find(name); folded != folded_blobs_.end()) {
      CORTADO_THROW(kNotFound,
                    "net '{}' does not compute blob '{}': the BatchNorm chain that writes it "
                    "computes the sum '{}' in its place, which alone reads it; its input is "
                    "'{}' (with CORTADO_FOLD_SUMS=0 it is computed)",
                    name_, name, folded->second, BatchNormInputName(name));
    }
    CORTADO_THROW(kNotFound, "net '{}' has no blob named '{}'", name_, name);
  }
  return blobs_[it->second].get();
}

Layer* Net::layer_by_name(const std::string& name) const {
  auto it = layer_index_.find(name);
  if (it == layer_index_.end()) {
    CORTADO_THROW(kNotFound, "net '{}' has no layer named '{}'", name_, name);
  }
  return layers_[it->second].get();
}

std::vector<int> Net::LearnableParamFirstLayers() const {
  std::vector<int> first(learnable_params_.size(), static_cast<int>(layers_.size()));
  for (size_t k = 0; k < params_.size(); ++k) {
    const int owner = param_owners_[k] < 0 ? static_cast<int>(k) : param_owners_[k];
    const auto it = std::find(learnable_param_ids_.begin(), learnable_param_ids_.end(), owner);
    CORTADO_CHECK(it != learnable_param_ids_.end(), "parameter {} has no learnable owner", k);
    int& layer = first[it - learnable_param_ids_.begin()];
    layer = std::min(layer, param_layer_indices_[k].first);
  }
  return first;
}

void Net::SetDataShard(int shard, int num_shards) {
  if (num_shards < 1 || shard < 0 || shard >= num_shards) {
    CORTADO_THROW(kInvalidArgument, "net '{}': data shard {} of {} does not exist", name_, shard,
                  num_shards);
  }
  for (const auto& layer : layers_) layer->SetShard(shard, num_shards);
}

}  // namespace cortado