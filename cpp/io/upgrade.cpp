// SPDX-License-Identifier: Apache-2.0
// Behaviour follows Caffe's src/caffe/util/upgrade_proto.cpp; see upgrade.hpp for the steps and
// for where Cortado is stricter.
#include "io/upgrade.hpp"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>

#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/logging.hpp"

namespace cortado::io {
namespace {

using caffe::LayerParameter;
using caffe::NetParameter;
using caffe::V0LayerParameter;
using caffe::V1LayerParameter;

// "layer 'conv1'", or "layer #3" for an unnamed one (index counts from 0 in file order).
std::string LayerLabel(const std::string& name, int index) {
  return name.empty() ? fmt::format("layer #{}", index) : fmt::format("layer '{}'", name);
}

// ---------------------------------------------------------------------------------------------
// Step 1: V0 -> V1.

bool HasV0Layers(const NetParameter& net) {
  for (const auto& layer : net.layers()) {
    if (layer.has_layer()) return true;
  }
  return false;
}

// The V1 enum for a V0 type string; the table is Caffe's UpgradeV0LayerType.
V1LayerParameter::LayerType V0LayerType(const std::string& source, int index,
                                        const V0LayerParameter& v0) {
  static const std::map<std::string, V1LayerParameter::LayerType> kTypes = {
      {"accuracy", V1LayerParameter::ACCURACY},
      {"bnll", V1LayerParameter::BNLL},
      {"concat", V1LayerParameter::CONCAT},
      {"conv", V1LayerParameter::CONVOLUTION},
      {"data", V1LayerParameter::DATA},
      {"dropout", V1LayerParameter::DROPOUT},
      {"euclidean_loss", V1LayerParameter::EUCLIDEAN_LOSS},
      {"flatten", V1LayerParameter::FLATTEN},
      {"hdf5_data", V1LayerParameter::HDF5_DATA},
      {"hdf5_output", V1LayerParameter::HDF5_OUTPUT},
      {"im2col", V1LayerParameter::IM2COL},
      {"images", V1LayerParameter::IMAGE_DATA},
      {"infogain_loss", V1LayerParameter::INFOGAIN_LOSS},
      {"innerproduct", V1LayerParameter::INNER_PRODUCT},
      {"lrn", V1LayerParameter::LRN},
      {"multinomial_logistic_loss", V1LayerParameter::MULTINOMIAL_LOGISTIC_LOSS},
      {"pool", V1LayerParameter::POOLING},
      {"relu", V1LayerParameter::RELU},
      {"sigmoid", V1LayerParameter::SIGMOID},
      {"softmax", V1LayerParameter::SOFTMAX},
      {"softmax_loss", V1LayerParameter::SOFTMAX_LOSS},
      {"split", V1LayerParameter::SPLIT},
      {"tanh", V1LayerParameter::TANH},
      {"window_data", V1LayerParameter::WINDOW_DATA},
  };
  if (!v0.has_type()) {
    CORTADO_THROW(kParse, "{}: V0 {} has no type", source, LayerLabel(v0.name(), index));
  }
  auto it = kTypes.find(v0.type());
  if (it == kTypes.end()) {
    std::vector<std::string> known;
    for (const auto& entry : kTypes) known.push_back(entry.first);
    CORTADO_THROW(kParse, "{}: V0 {} has unknown type '{}' (known: {}, padding)", source,
                  LayerLabel(v0.name(), index), v0.type(), fmt::join(known, ", "));
  }
  return it->second;
}

// V0 nets padded with separate "padding" layers; Caffe's UpgradeV0PaddingLayers folds each into
// the conv or pool layer it feeds: that layer takes the padding's `pad` and reads the padding
// layer's input directly. Returns how many were folded.
int FoldV0Padding(const std::string& source, NetParameter* net) {
  // For each blob, the index (in the original list) of the last layer writing it; -1 for inputs.
  std::map<std::string, int> producer;
  for (const auto& name : net->input()) producer[name] = -1;
  google::protobuf::RepeatedPtrField<V1LayerParameter> kept;
  int folded = 0;
  for (int i = 0; i < net->layers_size(); ++i) {
    // Kept layers are moved (not copied: they may hold weights) into `kept`; padding layers
    // stay where they are, so the lookups below still find them.
    V1LayerParameter* layer = net->mutable_layers(i);
    const bool padding = layer->layer().type() == "padding";
    if (!padding) {
      V1LayerParameter* moved = kept.Add();
      moved->Swap(layer);
      layer = moved;
    }
    const std::string& type = layer->layer().type();
    const std::string label = LayerLabel(layer->layer().name(), i);
    for (int j = 0; j < layer->bottom_size(); ++j) {
      auto it = producer.find(layer->bottom(j));
      if (it == producer.end()) {
        CORTADO_THROW(kParse,
                      "{}: V0 {} reads blob '{}', which no earlier layer or net input "
                      "produces",
                      source, label, layer->bottom(j));
      }
      if (it->second < 0) continue;
      const V1LayerParameter& from = net->layers(it->second);
      if (from.layer().type() != "padding") continue;
      const std::string from_label = LayerLabel(from.layer().name(), it->second);
      if (type != "conv" && type != "pool") {
        CORTADO_THROW(kParse,
                      "{}: V0 padding {} feeds {} of type '{}'; only conv and pool "
                      "layers can take over a padding layer",
                      source, from_label, label, type);
      }
      if (layer->bottom_size() != 1 || from.bottom_size() != 1 || from.top_size() != 1) {
        CORTADO_THROW(kParse,
                      "{}: V0 padding {} ({} bottom(s), {} top(s)) feeds {} ({} "
                      "bottom(s)); folding needs one blob in and out of each",
                      source, from_label, from.bottom_size(), from.top_size(), label,
                      layer->bottom_size());
      }
      layer->mutable_layer()->set_pad(from.layer().pad());
      layer->set_bottom(j, from.bottom(0));
      ++folded;
    }
    for (const auto& top : layer->top()) producer[top] = i;
  }
  net->mutable_layers()->Swap(&kept);
  return folded;
}

// Rewrites one V0 entry as a V1 layer (Caffe's UpgradeV0LayerParameter). Blobs are moved out of
// `in`. Entries without a nested V0 layer are already V1 and are left alone.
void UpgradeV0Layer(const std::string& source, int index, V1LayerParameter* in) {
  if (!in->has_layer()) return;
  V0LayerParameter* v0 = in->mutable_layer();
  V1LayerParameter out;
  *out.mutable_bottom() = in->bottom();
  *out.mutable_top() = in->top();
  if (v0->has_name()) out.set_name(v0->name());
  out.set_type(V0LayerType(source, index, *v0));
  out.mutable_blobs()->Swap(v0->mutable_blobs());
  *out.mutable_blobs_lr() = v0->blobs_lr();
  *out.mutable_weight_decay() = v0->weight_decay();

  const std::string& type = v0->type();
  const bool conv = type == "conv";
  const bool pool = type == "pool";
  const bool ip = type == "innerproduct";
  const bool data = type == "data";
  const bool images = type == "images";
  const bool window = type == "window_data";
  const bool hdf5 = type == "hdf5_data";
  const bool lrn = type == "lrn";
  // V0 fields set on a type that has no such parameter; Caffe logs and goes on.
  std::vector<const char*> ignored;

  if (v0->has_num_output()) {
    if (conv) {
      out.mutable_convolution_param()->set_num_output(v0->num_output());
    } else if (ip) {
      out.mutable_inner_product_param()->set_num_output(v0->num_output());
    } else {
      ignored.push_back("num_output");
    }
  }
  if (v0->has_biasterm()) {
    if (conv) {
      out.mutable_convolution_param()->set_bias_term(v0->biasterm());
    } else if (ip) {
      out.mutable_inner_product_param()->set_bias_term(v0->biasterm());
    } else {
      ignored.push_back("biasterm");
    }
  }
  if (v0->has_weight_filler()) {
    if (conv) {
      *out.mutable_convolution_param()->mutable_weight_filler() = v0->weight_filler();
    } else if (ip) {
      *out.mutable_inner_product_param()->mutable_weight_filler() = v0->weight_filler();
    } else {
      ignored.push_back("weight_filler");
    }
  }
  if (v0->has_bias_filler()) {
    if (conv) {
      *out.mutable_convolution_param()->mutable_bias_filler() = v0->bias_filler();
    } else if (ip) {
      *out.mutable_inner_product_param()->mutable_bias_filler() = v0->bias_filler();
    } else {
      ignored.push_back("bias_filler");
    }
  }
  if (v0->has_pad()) {
    if (conv) {
      out.mutable_convolution_param()->add_pad(v0->pad());
    } else if (pool) {
      out.mutable_pooling_param()->set_pad(v0->pad());
    } else {
      ignored.push_back("pad");
    }
  }
  if (v0->has_kernelsize()) {
    if (conv) {
      out.mutable_convolution_param()->add_kernel_size(v0->kernelsize());
    } else if (pool) {
      out.mutable_pooling_param()->set_kernel_size(v0->kernelsize());
    } else {
      ignored.push_back("kernelsize");
    }
  }
  if (v0->has_group()) {
    if (conv) {
      out.mutable_convolution_param()->set_group(v0->group());
    } else {
      ignored.push_back("group");
    }
  }
  if (v0->has_stride()) {
    if (conv) {
      out.mutable_convolution_param()->add_stride(v0->stride());
    } else if (pool) {
      out.mutable_pooling_param()->set_stride(v0->stride());
    } else {
      ignored.push_back("stride");
    }
  }
  if (v0->has_pool()) {
    if (pool) {
      // The two PoolMethod enums number MAX, AVE and STOCHASTIC alike.
      out.mutable_pooling_param()->set_pool(
          static_cast<caffe::PoolingParameter::PoolMethod>(v0->pool()));
    } else {
      ignored.push_back("pool");
    }
  }
  if (v0->has_dropout_ratio()) {
    if (type == "dropout") {
      out.mutable_dropout_param()->set_dropout_ratio(v0->dropout_ratio());
    } else {
      ignored.push_back("dropout_ratio");
    }
  }
  if (v0->has_local_size()) {
    if (lrn) {
      out.mutable_lrn_param()->set_local_size(v0->local_size());
    } else {
      ignored.push_back("local_size");
    }
  }
  if (v0->has_alpha()) {
    if (lrn) {
      out.mutable_lrn_param()->set_alpha(v0->alpha());
    } else {
      ignored.push_back("alpha");
    }
  }
  if (v0->has_beta()) {
    if (lrn) {
      out.mutable_lrn_param()->set_beta(v0->beta());
    } else {
      ignored.push_back("beta");
    }
  }
  if (v0->has_k()) {
    if (lrn) {
      out.mutable_lrn_param()->set_k(v0->k());
    } else {
      ignored.push_back("k");
    }
  }
  if (v0->has_source()) {
    if (data) {
      out.mutable_data_param()->set_source(v0->source());
    } else if (hdf5) {
      out.mutable_hdf5_data_param()->set_source(v0->source());
    } else if (images) {
      out.mutable_image_data_param()->set_source(v0->source());
    } else if (window) {
      out.mutable_window_data_param()->set_source(v0->source());
    } else if (type == "infogain_loss") {
      out.mutable_infogain_loss_param()->set_source(v0->source());
    } else {
      ignored.push_back("source");
    }
  }
  // Caffe moves the four transformation fields into transform_param whatever the type.
  if (v0->has_scale()) out.mutable_transform_param()->set_scale(v0->scale());
  if (v0->has_meanfile()) out.mutable_transform_param()->set_mean_file(v0->meanfile());
  if (v0->has_cropsize()) out.mutable_transform_param()->set_crop_size(v0->cropsize());
  if (v0->has_mirror()) out.mutable_transform_param()->set_mirror(v0->mirror());
  if (v0->has_batchsize()) {
    if (data) {
      out.mutable_data_param()->set_batch_size(v0->batchsize());
    } else if (hdf5) {
      out.mutable_hdf5_data_param()->set_batch_size(v0->batchsize());
    } else if (images) {
      out.mutable_image_data_param()->set_batch_size(v0->batchsize());
    } else if (window) {
      out.mutable_window_data_param()->set_batch_size(v0->batchsize());
    } else {
      ignored.push_back("batchsize");
    }
  }
  if (v0->has_rand_skip()) {
    if (data) {
      out.mutable_data_param()->set_rand_skip(v0->rand_skip());
    } else if (images) {
      out.mutable_image_data_param()->set_rand_skip(v0->rand_skip());
    } else {
      ignored.push_back("rand_skip");
    }
  }
  if (v0->has_shuffle_images()) {
    if (images) {
      out.mutable_image_data_param()->set_shuffle(v0->shuffle_images());
    } else {
      ignored.push_back("shuffle_images");
    }
  }
  if (v0->has_new_height()) {
    if (images) {
      out.mutable_image_data_param()->set_new_height(v0->new_height());
    } else {
      ignored.push_back("new_height");
    }
  }
  if (v0->has_new_width()) {
    if (images) {
      out.mutable_image_data_param()->set_new_width(v0->new_width());
    } else {
      ignored.push_back("new_width");
    }
  }
  if (v0->has_concat_dim()) {
    if (type == "concat") {
      out.mutable_concat_param()->set_concat_dim(v0->concat_dim());
    } else {
      ignored.push_back("concat_dim");
    }
  }
  if (v0->has_det_fg_threshold()) {
    if (window) {
      out.mutable_window_data_param()->set_fg_threshold(v0->det_fg_threshold());
    } else {
      ignored.push_back("det_fg_threshold");
    }
  }
  if (v0->has_det_bg_threshold()) {
    if (window) {
      out.mutable_window_data_param()->set_bg_threshold(v0->det_bg_threshold());
    } else {
      ignored.push_back("det_bg_threshold");
    }
  }
  if (v0->has_det_fg_fraction()) {
    if (window) {
      out.mutable_window_data_param()->set_fg_fraction(v0->det_fg_fraction());
    } else {
      ignored.push_back("det_fg_fraction");
    }
  }
  if (v0->has_det_context_pad()) {
    if (window) {
      out.mutable_window_data_param()->set_context_pad(v0->det_context_pad());
    } else {
      ignored.push_back("det_context_pad");
    }
  }
  if (v0->has_det_crop_mode()) {
    if (window) {
      out.mutable_window_data_param()->set_crop_mode(v0->det_crop_mode());
    } else {
      ignored.push_back("det_crop_mode");
    }
  }
  if (v0->has_hdf5_output_param()) {
    if (type == "hdf5_output") {
      *out.mutable_hdf5_output_param() = v0->hdf5_output_param();
    } else {
      ignored.push_back("hdf5_output_param");
    }
  }
  // The old reshape fields never had a V1 home; Caffe drops them without a word.
  if (v0->has_new_num()) ignored.push_back("new_num");
  if (v0->has_new_channels()) ignored.push_back("new_channels");

  if (!ignored.empty()) {
    CORTADO_LOG_WARN("{}: V0 {} of type '{}': ignored field(s) {}, which that type does not take",
                     source, LayerLabel(v0->name(), index), type, fmt::join(ignored, ", "));
  }
  in->Swap(&out);
}

void UpgradeV0Net(const std::string& source, NetParameter* net) {
  const int folded = FoldV0Padding(source, net);
  for (int i = 0; i < net->layers_size(); ++i) UpgradeV0Layer(source, i, net->mutable_layers(i));
  CORTADO_LOG_INFO("{}: upgraded {} V0 layer definition(s) to V1 (folded {} padding layer(s))",
                   source, net->layers_size(), folded);
}

// ---------------------------------------------------------------------------------------------
// Step 2: deprecated transformation fields of V1 data layers (Caffe's
// UpgradeNetDataTransformation).

// DataParameter, ImageDataParameter and WindowDataParameter share these four field names.
template <typename DataParam>
bool MoveTransformFields(DataParam* data, V1LayerParameter* layer) {
  if (!data->has_scale() && !data->has_mean_file() && !data->has_crop_size() &&
      !data->has_mirror()) {
    return false;
  }
  caffe::TransformationParameter* transform = layer->mutable_transform_param();
  if (data->has_scale()) transform->set_scale(data->scale());
  if (data->has_mean_file()) transform->set_mean_file(data->mean_file());
  if (data->has_crop_size()) transform->set_crop_size(data->crop_size());
  if (data->has_mirror()) transform->set_mirror(data->mirror());
  data->clear_scale();
  data->clear_mean_file();
  data->clear_crop_size();
  data->clear_mirror();
  return true;
}

// Returns the names of the layers it changed.
std::vector<std::string> UpgradeV1DataTransformation(NetParameter* net) {
  std::vector<std::string> changed;
  for (int i = 0; i < net->layers_size(); ++i) {
    V1LayerParameter* layer = net->mutable_layers(i);
    bool moved = false;
    if (layer->type() == V1LayerParameter::DATA && layer->has_data_param()) {
      moved = MoveTransformFields(layer->mutable_data_param(), layer);
    } else if (layer->type() == V1LayerParameter::IMAGE_DATA && layer->has_image_data_param()) {
      moved = MoveTransformFields(layer->mutable_image_data_param(), layer);
    } else if (layer->type() == V1LayerParameter::WINDOW_DATA && layer->has_window_data_param()) {
      moved = MoveTransformFields(layer->mutable_window_data_param(), layer);
    }
    if (moved) changed.push_back(LayerLabel(layer->name(), i));
  }
  return changed;
}

bool NeedsDataTransformationUpgrade(const NetParameter& net) {
  auto deprecated = [](const auto& p) {
    return p.has_scale() || p.has_mean_file() || p.has_crop_size() || p.has_mirror();
  };
  for (const auto& layer : net.layers()) {
    if ((layer.type() == V1LayerParameter::DATA && deprecated(layer.data_param())) ||
        (layer.type() == V1LayerParameter::IMAGE_DATA && deprecated(layer.image_data_param())) ||
        (layer.type() == V1LayerParameter::WINDOW_DATA && deprecated(layer.window_data_param()))) {
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Step 3: V1 -> current.

// A V1 type number this build does not define lands in the unknown fields when a binary file
// is parsed; find it for the error message.
std::string UnknownTypeNumber(const V1LayerParameter& layer) {
  const auto& unknown = layer.GetReflection()->GetUnknownFields(layer);
  for (int k = 0; k < unknown.field_count(); ++k) {
    const auto& field = unknown.field(k);
    if (field.number() == V1LayerParameter::kTypeFieldNumber &&
        field.type() == google::protobuf::UnknownField::TYPE_VARINT) {
      return std::to_string(field.varint());
    }
  }
  return {};
}

// Copies every *_param message that V1LayerParameter shares with LayerParameter (same name,
// same message type: all of them), so no parameter is forgotten when the proto grows.
void CopyTypeParams(const V1LayerParameter& in, LayerParameter* out) {
  const google::protobuf::Reflection* in_reflection = in.GetReflection();
  const google::protobuf::Reflection* out_reflection = out->GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  in_reflection->ListFields(in, &fields);
  for (const auto* field : fields) {
    const std::string& name = field->name();
    if (field->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE || field->is_repeated() ||
        name.size() < 6 || name.compare(name.size() - 6, 6, "_param")) {
      continue;
    }
    const auto* target = LayerParameter::descriptor()->FindFieldByName(name);
    CORTADO_CHECK(target != nullptr && target->message_type() == field->message_type(),
                  "V1LayerParameter.{} has no counterpart in LayerParameter", name);
    out_reflection->MutableMessage(out, target)->CopyFrom(in_reflection->GetMessage(in, field));
  }
}

// Rewrites one V1 layer (Caffe's UpgradeV1LayerParameter); blobs are moved out of `in`.
void UpgradeV1Layer(const std::string& source, int index, V1LayerParameter* in,
                    LayerParameter* out) {
  const std::string label = LayerLabel(in->name(), index);
  if (!in->has_type() || in->type() == V1LayerParameter::NONE) {
    const std::string number = UnknownTypeNumber(*in);
    if (!number.empty()) {
      CORTADO_THROW(kParse,
                    "{}: V1 {} has layer type number {}, which V1LayerParameter does "
                    "not define",
                    source, label, number);
    }
    CORTADO_THROW(kParse, "{}: V1 {} has no layer type (or type NONE)", source, label);
  }
  const std::string type = V1LayerTypeName(in->type());
  if (type.empty()) {
    CORTADO_THROW(kParse, "{}: V1 {} has unsupported layer type {} ({})", source, label,
                  V1LayerParameter::LayerType_Name(in->type()), static_cast<int>(in->type()));
  }
  out->Clear();
  if (in->has_name()) out->set_name(in->name());
  out->set_type(type);
  *out->mutable_bottom() = in->bottom();
  *out->mutable_top() = in->top();
  *out->mutable_include() = in->include();
  *out->mutable_exclude() = in->exclude();
  out->mutable_blobs()->Swap(in->mutable_blobs());
  *out->mutable_loss_weight() = in->loss_weight();

  // The four per-blob lists become one ParamSpec per blob, as long as the longest list.
  auto spec = [out](int i) {
    while (out->param_size() <= i) out->add_param();
    return out->mutable_param(i);
  };
  for (int i = 0; i < in->param_size(); ++i) spec(i)->set_name(in->param(i));
  for (int i = 0; i < in->blob_share_mode_size(); ++i) {
    // Both DimCheckMode enums number STRICT and PERMISSIVE alike.
    spec(i)->set_share_mode(static_cast<caffe::ParamSpec::DimCheckMode>(in->blob_share_mode(i)));
  }
  for (int i = 0; i < in->blobs_lr_size(); ++i) spec(i)->set_lr_mult(in->blobs_lr(i));
  for (int i = 0; i < in->weight_decay_size(); ++i) spec(i)->set_decay_mult(in->weight_decay(i));

  CopyTypeParams(*in, out);
}

void UpgradeV1Net(const std::string& source, NetParameter* net) {
  if (net->layer_size() > 0) {
    CORTADO_THROW(kParse,
                  "{}: the net has both old-format `layers` ({}) and new-format `layer` "
                  "({}) entries; write all layers in one format",
                  source, net->layers_size(), net->layer_size());
  }
  for (int i = 0; i < net->layers_size(); ++i) {
    UpgradeV1Layer(source, i, net->mutable_layers(i), net->add_layer());
  }
  net->clear_layers();
  CORTADO_LOG_INFO(
      "{}: upgraded {} V1 layer definition(s) (`layers {{ type: ENUM }}`) to the "
      "current format",
      source, net->layer_size());
}

// ---------------------------------------------------------------------------------------------
// Step 4: net-level inputs (Caffe's UpgradeNetInput).

bool NeedsInputUpgrade(const NetParameter& net) {
  return net.input_size() > 0 || net.input_shape_size() > 0 || net.input_dim_size() > 0;
}

void UpgradeNetInput(const std::string& source, NetParameter* net) {
  const int n = net->input_size();
  const bool has_shape = net->input_shape_size() > 0;
  const bool has_dim = net->input_dim_size() > 0;
  if (n == 0) {
    CORTADO_THROW(kParse,
                  "{}: the net has {} input_shape and {} input_dim entries but no "
                  "`input` names",
                  source, net->input_shape_size(), net->input_dim_size());
  }
  const std::string names = fmt::format("'{}'", fmt::join(net->input(), "', '"));
  if (has_shape && net->input_shape_size() != n) {
    CORTADO_THROW(kParse, "{}: the net declares {} input(s) ({}) but {} input_shape entries",
                  source, n, names, net->input_shape_size());
  }
  if (!has_shape && has_dim && net->input_dim_size() != 4 * n) {
    CORTADO_THROW(kParse,
                  "{}: the net declares {} input(s) ({}) and needs 4 input_dim values "
                  "for each ({}), but has {}",
                  source, n, names, 4 * n, net->input_dim_size());
  }
  if (has_shape || has_dim) {
    LayerParameter* layer = net->add_layer();
    layer->set_name("input");
    layer->set_type("Input");
    caffe::InputParameter* input = layer->mutable_input_param();
    for (int i = 0; i < n; ++i) {
      layer->add_top(net->input(i));
      caffe::BlobShape* shape = input->add_shape();
      if (has_shape) {
        *shape = net->input_shape(i);
      } else {
        for (int j = 4 * i; j < 4 * i + 4; ++j) shape->add_dim(net->input_dim(j));
      }
    }
    // Bubble it to the front: every other layer may read these blobs.
    for (int i = net->layer_size() - 1; i > 0; --i) net->mutable_layer()->SwapElements(i, i - 1);
    CORTADO_LOG_INFO(
        "{}: replaced the net-level input fields with an Input layer 'input' "
        "producing {}",
        source, names);
  } else {
    // Old .caffemodel files list the input names without shapes: nothing to build.
    CORTADO_LOG_INFO("{}: dropped the net-level input name(s) {}, which carry no shape", source,
                     names);
  }
  net->clear_input();
  net->clear_input_shape();
  net->clear_input_dim();
}

// ---------------------------------------------------------------------------------------------
// Step 5: BatchNorm (Caffe's UpgradeNetBatchNorm).

bool BatchNormNeedsUpgrade(const LayerParameter& layer) {
  if (layer.type() != "BatchNorm" || layer.param_size() != 3) return false;
  for (const auto& p : layer.param()) {
    if (p.lr_mult() != 0.0f || p.decay_mult() != 0.0f) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------

bool SolverNetsNeedUpgrade(const caffe::SolverParameter& param) {
  if (param.has_net_param() && NetNeedsUpgrade(param.net_param())) return true;
  if (param.has_train_net_param() && NetNeedsUpgrade(param.train_net_param())) return true;
  for (const auto& net : param.test_net_param()) {
    if (NetNeedsUpgrade(net)) return true;
  }
  return false;
}

}  // namespace

std::string V1LayerTypeName(caffe::V1LayerParameter::LayerType type) {
  // Caffe's UpgradeV1LayerType. No default case, so -Wswitch flags a value added to the enum.
  switch (type) {
    case V1LayerParameter::NONE:
      return "";
    case V1LayerParameter::ABSVAL:
      return "AbsVal";
    case V1LayerParameter::ACCURACY:
      return "Accuracy";
    case V1LayerParameter::ARGMAX:
      return "ArgMax";
    case V1LayerParameter::BNLL:
      return "BNLL";
    case V1LayerParameter::CONCAT:
      return "Concat";
    case V1LayerParameter::CONTRASTIVE_LOSS:
      return "ContrastiveLoss";
    case V1LayerParameter::CONVOLUTION:
      return "Convolution";
    case V1LayerParameter::DATA:
      return "Data";
    case V1LayerParameter::DECONVOLUTION:
      return "Deconvolution";
    case V1LayerParameter::DROPOUT:
      return "Dropout";
    case V1LayerParameter::DUMMY_DATA:
      return "DummyData";
    case V1LayerParameter::EUCLIDEAN_LOSS:
      return "EuclideanLoss";
    case V1LayerParameter::ELTWISE:
      return "Eltwise";
    case V1LayerParameter::EXP:
      return "Exp";
    case V1LayerParameter::FLATTEN:
      return "Flatten";
    case V1LayerParameter::HDF5_DATA:
      return "HDF5Data";
    case V1LayerParameter::HDF5_OUTPUT:
      return "HDF5Output";
    case V1LayerParameter::HINGE_LOSS:
      return "HingeLoss";
    case V1LayerParameter::IM2COL:
      return "Im2col";
    case V1LayerParameter::IMAGE_DATA:
      return "ImageData";
    case V1LayerParameter::INFOGAIN_LOSS:
      return "InfogainLoss";
    case V1LayerParameter::INNER_PRODUCT:
      return "InnerProduct";
    case V1LayerParameter::LRN:
      return "LRN";
    case V1LayerParameter::MEMORY_DATA:
      return "MemoryData";
    case V1LayerParameter::MULTINOMIAL_LOGISTIC_LOSS:
      return "MultinomialLogisticLoss";
    case V1LayerParameter::MVN:
      return "MVN";
    case V1LayerParameter::POOLING:
      return "Pooling";
    case V1LayerParameter::POWER:
      return "Power";
    case V1LayerParameter::RELU:
      return "ReLU";
    case V1LayerParameter::SIGMOID:
      return "Sigmoid";
    case V1LayerParameter::SIGMOID_CROSS_ENTROPY_LOSS:
      return "SigmoidCrossEntropyLoss";
    case V1LayerParameter::SILENCE:
      return "Silence";
    case V1LayerParameter::SOFTMAX:
      return "Softmax";
    case V1LayerParameter::SOFTMAX_LOSS:
      return "SoftmaxWithLoss";
    case V1LayerParameter::SPLIT:
      return "Split";
    case V1LayerParameter::SLICE:
      return "Slice";
    case V1LayerParameter::TANH:
      return "TanH";
    case V1LayerParameter::WINDOW_DATA:
      return "WindowData";
    case V1LayerParameter::THRESHOLD:
      return "Threshold";
  }
  return "";
}

std::string SolverTypeName(caffe::SolverParameter::SolverType type) {
  switch (type) {
    case caffe::SolverParameter::SGD:
      return "SGD";
    case caffe::SolverParameter::NESTEROV:
      return "Nesterov";
    case caffe::SolverParameter::ADAGRAD:
      return "AdaGrad";
    case caffe::SolverParameter::RMSPROP:
      return "RMSProp";
    case caffe::SolverParameter::ADADELTA:
      return "AdaDelta";
    case caffe::SolverParameter::ADAM:
      return "Adam";
  }
  return "";
}

bool NetNeedsUpgrade(const caffe::NetParameter& param) {
  if (param.layers_size() > 0 || NeedsInputUpgrade(param)) return true;
  for (const auto& layer : param.layer()) {
    if (BatchNormNeedsUpgrade(layer)) return true;
  }
  return false;
}

bool UpgradeNetAsNeeded(const std::string& source, caffe::NetParameter* param) {
  bool changed = false;
  if (HasV0Layers(*param)) {
    UpgradeV0Net(source, param);
    changed = true;
  }
  if (NeedsDataTransformationUpgrade(*param)) {
    const std::vector<std::string> layers = UpgradeV1DataTransformation(param);
    CORTADO_LOG_INFO(
        "{}: moved the deprecated data transformation fields (scale, mean_file, "
        "crop_size, mirror) of {} into transform_param",
        source, fmt::join(layers, ", "));
    changed = true;
  }
  if (param->layers_size() > 0) {
    UpgradeV1Net(source, param);
    changed = true;
  }
  if (NeedsInputUpgrade(*param)) {
    UpgradeNetInput(source, param);
    changed = true;
  }
  std::vector<std::string> batch_norms;
  for (int i = 0; i < param->layer_size(); ++i) {
    LayerParameter* layer = param->mutable_layer(i);
    if (!BatchNormNeedsUpgrade(*layer)) continue;
    for (auto& p : *layer->mutable_param()) {
      p.set_lr_mult(0.0f);
      p.set_decay_mult(0.0f);
    }
    batch_norms.push_back(LayerLabel(layer->name(), i));
  }
  if (!batch_norms.empty()) {
    CORTADO_LOG_INFO(
        "{}: set lr_mult and decay_mult to 0 in the 3 param specs of BatchNorm {} "
        "(its statistics are not learned)",
        source, fmt::join(batch_norms, ", "));
    changed = true;
  }
  return changed;
}

bool SolverNeedsUpgrade(const caffe::SolverParameter& param) {
  return param.has_solver_type() || SolverNetsNeedUpgrade(param);
}

bool UpgradeSolverAsNeeded(const std::string& source, caffe::SolverParameter* param) {
  bool changed = false;
  if (param->has_solver_type()) {
    const std::string type = SolverTypeName(param->solver_type());
    if (type.empty()) {
      CORTADO_THROW(kParse, "{}: unknown solver_type {}", source,
                    static_cast<int>(param->solver_type()));
    }
    if (param->has_type() && param->type() != type) {
      CORTADO_THROW(kParse,
                    "{}: solver_type {} (deprecated, means type \"{}\") disagrees with "
                    "type \"{}\"; keep only `type`",
                    source, caffe::SolverParameter::SolverType_Name(param->solver_type()), type,
                    param->type());
    }
    CORTADO_LOG_INFO("{}: replaced the deprecated solver_type {} with type \"{}\"", source,
                     caffe::SolverParameter::SolverType_Name(param->solver_type()), type);
    param->set_type(type);
    param->clear_solver_type();
    changed = true;
  }
  if (param->has_net_param() && NetNeedsUpgrade(param->net_param())) {
    changed |= UpgradeNetAsNeeded(source + " (net_param)", param->mutable_net_param());
  }
  if (param->has_train_net_param() && NetNeedsUpgrade(param->train_net_param())) {
    changed |= UpgradeNetAsNeeded(source + " (train_net_param)", param->mutable_train_net_param());
  }
  for (int i = 0; i < param->test_net_param_size(); ++i) {
    if (!NetNeedsUpgrade(param->test_net_param(i))) continue;
    changed |= UpgradeNetAsNeeded(fmt::format("{} (test_net_param {})", source, i),
                                  param->mutable_test_net_param(i));
  }
  return changed;
}

}  // namespace cortado::io
