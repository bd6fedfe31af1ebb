// SPDX-License-Identifier: Apache-2.0
// The ONNX export (onnx_export.hpp). One pass over the net's layers in order: each Caffe blob
// version (a top written again in place is a new version, as ONNX values are written once)
// becomes one ONNX value; Split and Dropout tops are the same value as their bottom; each layer
// with a counterpart appends the nodes that compute it, its learned blobs as initializers.
// docs/onnx.md tells, layer by layer, what each becomes and why.
#include "onnx/onnx_export.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "layers/layer.hpp"

namespace cortado {

NetOptions OnnxExportNetOptions() {
  NetOptions options;
  options.fuse = false;
  options.fold_splits = false;
  options.share_buffers = false;
  options.recompute = false;
  options.fold_sums_into_batch_norms = NetOptions::SumFolds::kNever;
  return options;
}

namespace {

using Dims = std::vector<int64_t>;

Dims DimsOf(const Tensor& t) { return Dims(t.shape().begin(), t.shape().end()); }

bool IsDataLayer(const std::string& type) {
  static const std::set<std::string> kData = {"Input",      "Data",       "ImageData", "HDF5Data",
                                              "MemoryData", "WindowData", "DummyData", "CoSData"};
  return kData.count(type) != 0;
}

// Layers a deploy net has no use for: their outputs are scores of the training, not the model's.
bool IsLeftOut(const std::string& type) {
  return type == "Accuracy" || type == "Silence" || type == "HDF5Output" ||
         (type.size() > 4 && type.compare(type.size() - 4, 4, "Loss") == 0);
}

// What a layer writes: one ONNX value per top, or its bottom's values under the tops' names.
enum class Role { kInput, kLeftOut, kAlias, kNodes };

class Exporter {
 public:
  Exporter(const Net& net, const OnnxExportOptions& options) : net_(net), options_(options) {}

  onnx::ModelProto Run();

 private:
  struct LayerPlan {
    Role role = Role::kNodes;
    std::vector<int> bottoms;  // value ids
    std::vector<int> tops;     // value ids
    int folded_into = -1;      // a Scale folded into the BatchNorm at this index
    int fold_scale = -1;       // a BatchNorm's folded Scale
  };
  struct Value {
    int blob = -1;
    int writer = -1;  // layer index
    std::string name;
    int readers = 0;  // layers with Role::kNodes reading it
  };

  void Plan();
  void NameValues();
  void EmitLayer(int index);
  void AddValueInfo(onnx::ValueInfoProto* info, const Value& value) const;

  // Names and graph parts.
  std::string Unique(const std::string& base);
  const std::string& In(int layer, int bottom) const;
  const std::string& Out(int layer, int top) const;
  std::string Temp(int layer, const std::string& what);
  onnx::NodeProto* Node(int layer, const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs);
  std::string FloatInit(const std::string& base, const Dims& dims, const float* data);
  std::string FloatInit(const std::string& base, const Dims& dims, const std::vector<float>& v) {
    return FloatInit(base, dims, v.data());
  }
  std::string Scalar(int layer, const std::string& what, float value);
  // `input` padded with zeros on both sides of its two spatial axes.
  std::string ZeroPad(int l, const std::string& input, int64_t pad_h, int64_t pad_w);
  std::string Int64Init(const std::string& base, const std::vector<int64_t>& values);
  // A shape for Reshape: `dims` with axis 0 copied from the input (0) where the batch is kept,
  // otherwise the net's own batch size (and the model's batch fixed to it).
  std::string ShapeInit(int layer, const Dims& dims, bool keeps_batch);
  void FixBatch(int layer, const std::string& why);
  [[noreturn]] void Refuse(int layer, const std::string& why) const;
  std::string Describe(int layer) const;
  // Scales and biases along `axis`..`axis + n`: `param` laid out to broadcast against `bottom`.
  Dims BroadcastDims(const Tensor& bottom, int axis, int num_axes) const;

  // Layer kinds.
  void Convolution(int l, bool transposed);
  void Pooling(int l);
  void InnerProduct(int l);
  void Lrn(int l);
  void BatchNorm(int l);
  void ScaleOrBias(int l, bool scale);
  void Eltwise(int l);
  void ReshapeLike(int l, bool keeps_batch);
  void Slice(int l);
  void Crop(int l);
  void Reduction(int l);
  void ArgMax(int l);
  void Mvn(int l);
  void Embed(int l);
  void Recurrent(int l, bool lstm);
  void Affine(int l, float scale, float shift, std::string* x);

  static void SetAttr(onnx::NodeProto* node, const std::string& name, int64_t v);
  static void SetAttr(onnx::NodeProto* node, const std::string& name, float v);
  static void SetAttr(onnx::NodeProto* node, const std::string& name, const Dims& v);

  const Net& net_;
  const OnnxExportOptions options_;
  onnx::ModelProto model_;
  onnx::GraphProto* graph_ = nullptr;
  std::vector<LayerPlan> plan_;
  std::vector<Value> values_;
  std::set<std::string> names_;
  int64_t batch_ = 0;  // the inputs' axis 0
  std::string batch_fixed_by_;
};

void Exporter::SetAttr(onnx::NodeProto* node, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void Exporter::SetAttr(onnx::NodeProto* node, const std::string& name, float v) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void Exporter::SetAttr(onnx::NodeProto* node, const std::string& name, const Dims& v) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

std::string Exporter::Describe(int layer) const {
  return fmt::format("layer '{}' (type {})", net_.layer_names()[layer],
                     net_.layers()[layer]->type());
}

void Exporter::Refuse(int layer, const std::string& why) const {
  CORTADO_THROW(kInvalidArgument, "{} cannot be exported to ONNX: {}", Describe(layer), why);
}

void Exporter::FixBatch(int layer, const std::string& why) {
  if (batch_fixed_by_.empty()) batch_fixed_by_ = Describe(layer) + ": " + why;
}

std::string Exporter::Unique(const std::string& base) {
  std::string name = base;
  for (int i = 1; names_.count(name) != 0; ++i) name = fmt::format("{}_{}", base, i);
  names_.insert(name);
  return name;
}

const std::string& Exporter::In(int layer, int bottom) const {
  return values_[plan_[layer].bottoms[bottom]].name;
}

const std::string& Exporter::Out(int layer, int top) const {
  return values_[plan_[layer].tops[top]].name;
}

std::string Exporter::Temp(int layer, const std::string& what) {
  return Unique(net_.layer_names()[layer] + "/" + what);
}

onnx::NodeProto* Exporter::Node(int layer, const std::string& op,
                                const std::vector<std::string>& inputs,
                                const std::vector<std::string>& outputs) {
  onnx::NodeProto* node = graph_->add_node();
  node->set_op_type(op);
  node->set_name(Unique(net_.layer_names()[layer] + "/" + op));
  for (const auto& in : inputs) node->add_input(in);
  for (const auto& out : outputs) node->add_output(out);
  return node;
}

std::string Exporter::FloatInit(const std::string& base, const Dims& dims, const float* data) {
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(Unique(base));
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t count = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    count *= d;
  }
  t->set_raw_data(
      std::string(reinterpret_cast<const char*>(data), static_cast<size_t>(count) * sizeof(float)));
  return t->name();
}

// Constants are 1-D of one value rather than 0-D: they broadcast the same against the layers'
// blobs (none of which is 0-D where one is used), and more runtimes read them.
std::string Exporter::Scalar(int layer, const std::string& what, float value) {
  return FloatInit(net_.layer_names()[layer] + "/" + what, {1}, &value);
}

std::string Exporter::Int64Init(const std::string& base, const std::vector<int64_t>& values) {
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(Unique(base));
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  t->set_raw_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t)));
  return t->name();
}

std::string Exporter::ShapeInit(int layer, const Dims& dims, bool keeps_batch) {
  Dims shape = dims;
  if (keeps_batch && !shape.empty()) {
    shape[0] = 0;
  } else {
    FixBatch(layer, "its output's first axis is not its input's");
  }
  return Int64Init(net_.layer_names()[layer] + "/shape", shape);
}

Dims Exporter::BroadcastDims(const Tensor& bottom, int axis, int num_axes) const {
  const int end = num_axes < 0 ? bottom.num_axes() : axis + num_axes;
  Dims dims;
  for (int i = axis; i < end; ++i) dims.push_back(bottom.shape(i));
  for (int i = end; i < bottom.num_axes(); ++i) dims.push_back(1);
  return dims;
}

// Roles, values and who reads them; then the BatchNorm + Scale pairs to fold.
void Exporter::Plan() {
  const int num_layers = static_cast<int>(net_.layers().size());
  plan_.resize(num_layers);
  std::vector<int> current(net_.blobs().size(), -1);  // blob -> value
  for (int l = 0; l < num_layers; ++l) {
    const std::string type = net_.layers()[l]->type();
    LayerPlan& p = plan_[l];
    if (IsDataLayer(type)) {
      p.role = Role::kInput;
    } else if (IsLeftOut(type)) {
      p.role = Role::kLeftOut;
    } else if (type == "Split" || type == "Dropout") {
      p.role = Role::kAlias;
    }
    for (int blob : net_.bottom_ids(l)) p.bottoms.push_back(current[blob]);
    const std::vector<int>& tops = net_.top_ids(l);
    for (size_t t = 0; t < tops.size(); ++t) {
      const bool scaled_dropout =
          type == "Dropout" && !net_.layers()[l]->layer_param().dropout_param().scale_train();
      if (p.role == Role::kAlias && !scaled_dropout) {
        p.tops.push_back(p.bottoms[0]);
      } else {
        if (p.role == Role::kAlias) p.role = Role::kNodes;
        values_.push_back(Value{tops[t], l, "", 0});
        p.tops.push_back(static_cast<int>(values_.size()) - 1);
      }
      current[tops[t]] = p.tops.back();
    }
    if (p.role == Role::kNodes) {
      for (size_t b = 0; b < p.bottoms.size(); ++b) {
        if (p.bottoms[b] < 0) {
          CORTADO_THROW(kInternal, "{}: bottom {} has no writer", Describe(l), b);
        }
        const Value& v = values_[p.bottoms[b]];
        if (plan_[v.writer].role == Role::kLeftOut) {
          CORTADO_THROW(kInvalidArgument,
                        "{} reads '{}', the output of {}, which an ONNX model leaves out (a "
                        "training score); export a deploy net",
                        Describe(l), net_.blob_names()[v.blob], Describe(v.writer));
        }
      }
      for (int b : p.bottoms) ++values_[b].readers;
    }
  }
  // A BatchNorm whose output only a per-channel Scale reads becomes one BatchNormalization with
  // the Scale's factors and biases.
  for (int l = 0; l < num_layers; ++l) {
    if (std::string(net_.layers()[l]->type()) != "BatchNorm") continue;
    const int out = plan_[l].tops[0];
    if (values_[out].readers != 1) continue;
    for (int s = l + 1; s < num_layers; ++s) {
      if (plan_[s].role != Role::kNodes) continue;
      const auto& b = plan_[s].bottoms;
      if (std::find(b.begin(), b.end(), out) == b.end()) continue;
      Layer& scale = *net_.layers()[s];
      const caffe::ScaleParameter& sp = scale.layer_param().scale_param();
      const Tensor& x = *net_.bottom_vecs()[s][0];
      const int axis = x.CanonicalAxisIndex(sp.axis());
      if (std::string(scale.type()) == "Scale" && b.size() == 1 && axis == 1 &&
          (sp.num_axes() == 1 || (sp.num_axes() == -1 && x.num_axes() == 2))) {
        plan_[l].fold_scale = s;
        plan_[s].folded_into = l;
      }
      break;
    }
  }
}

// The last version of a blob carries the blob's name (a net input its first); earlier versions
// are named after the blob and the layer that wrote them.
void Exporter::NameValues() {
  for (const auto& name : net_.blob_names()) names_.insert(name);
  std::map<int, std::vector<int>> versions;  // blob -> values in order
  for (size_t v = 0; v < values_.size(); ++v) versions[values_[v].blob].push_back(v);
  for (const auto& [blob, list] : versions) {
    const bool first_is_input = plan_[values_[list.front()].writer].role == Role::kInput;
    const size_t named = first_is_input ? 0 : list.size() - 1;
    for (size_t i = 0; i < list.size(); ++i) {
      Value& v = values_[list[i]];
      v.name = i == named ? net_.blob_names()[blob]
                          : Unique(net_.blob_names()[blob] + "@" + net_.layer_names()[v.writer]);
    }
  }
}

// The value's name, type and the blob's shape; with a dynamic batch, an axis 0 as long as the
// inputs' batch is the symbolic N.
void Exporter::AddValueInfo(onnx::ValueInfoProto* info, const Value& value) const {
  const Tensor& blob = *net_.blobs()[value.blob];
  info->set_name(value.name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = type->mutable_shape();
  const bool dynamic = options_.dynamic_batch && batch_fixed_by_.empty() && batch_ > 0;
  for (int i = 0; i < blob.num_axes(); ++i) {
    if (i == 0 && dynamic && blob.shape(0) == batch_) {
      shape->add_dim()->set_dim_param("N");
    } else {
      shape->add_dim()->set_dim_value(blob.shape(i));
    }
  }
}

onnx::ModelProto Exporter::Run() {
  if (options_.opset < kOnnxMinOpset || options_.opset > kOnnxMaxOpset) {
    CORTADO_THROW(kInvalidArgument, "ONNX opset {} is not supported: use {} to {}", options_.opset,
                  kOnnxMinOpset, kOnnxMaxOpset);
  }
  if (net_.options().fuse) {
    CORTADO_THROW(kInvalidArgument,
                  "net '{}' was built with fused layers; build it with OnnxExportNetOptions() to "
                  "export it",
                  net_.name());
  }
  model_.set_ir_version(options_.opset >= 15 ? 8 : 7);
  model_.set_producer_name("cortado");
  model_.set_producer_version(CORTADO_VERSION);
  auto* opset = model_.add_opset_import();
  opset->set_domain("");
  opset->set_version(options_.opset);
  graph_ = model_.mutable_graph();
  graph_->set_name(net_.name().empty() ? "net" : net_.name());

  Plan();
  NameValues();
  for (size_t l = 0; l < plan_.size(); ++l) {
    if (plan_[l].role == Role::kNodes && plan_[l].folded_into < 0) {
      EmitLayer(static_cast<int>(l));
    }
  }
  // Inputs: the data layers' tops a node reads. Outputs: values a node writes that no node reads
  // (what a deploy net's outputs are once its losses and accuracies are gone).
  std::set<std::string> read;
  std::set<std::string> written;
  for (const auto& node : graph_->node()) {
    for (const auto& in : node.input()) read.insert(in);
    for (const auto& out : node.output()) written.insert(out);
  }
  std::vector<const Value*> inputs;
  for (const Value& v : values_) {
    if (plan_[v.writer].role == Role::kInput && read.count(v.name) != 0) inputs.push_back(&v);
  }
  for (const Value* v : inputs) {
    const Tensor& blob = *net_.blobs()[v->blob];
    const int64_t batch = blob.num_axes() > 0 ? blob.shape(0) : -1;
    if (batch_ == 0) batch_ = batch;
    if (batch != batch_) FixBatch(v->writer, "the net's inputs differ in their first axis");
  }
  for (const Value* v : inputs) AddValueInfo(graph_->add_input(), *v);
  if (graph_->input_size() == 0) {
    CORTADO_THROW(kInvalidArgument, "net '{}' has no input that its exported layers read",
                  net_.name());
  }
  std::set<std::string> outputs;
  for (const auto& node : graph_->node()) {
    for (const auto& out : node.output()) {
      if (read.count(out) != 0 || outputs.count(out) != 0) continue;
      // Values named by the export alone (a layer's inner steps) are read by a later node.
      // Values named by the export alone (TopK's indices where only its values are asked for)
      // are not the net's outputs.
      auto value = std::find_if(values_.begin(), values_.end(),
                                [&](const Value& v) { return v.name == out; });
      if (value == values_.end()) continue;
      outputs.insert(out);
      AddValueInfo(graph_->add_output(), *value);
    }
  }
  if (graph_->output_size() == 0) {
    CORTADO_THROW(kInvalidArgument, "net '{}' has no output left to export", net_.name());
  }
  std::string doc =
      fmt::format("Caffe net '{}', exported by Cortado {}.", net_.name(), CORTADO_VERSION);
  if (!batch_fixed_by_.empty()) {
    doc += " The batch size is fixed at the net's own: " + batch_fixed_by_ + ".";
  }
  graph_->set_doc_string(doc);
  return model_;
}

void Exporter::EmitLayer(int l) {
  Layer& layer = *net_.layers()[l];
  const std::string type = layer.type();
  const caffe::LayerParameter& lp = layer.layer_param();
  if (type == "Convolution") return Convolution(l, false);
  if (type == "Deconvolution") return Convolution(l, true);
  if (type == "Pooling") return Pooling(l);
  if (type == "InnerProduct") return InnerProduct(l);
  if (type == "LRN") return Lrn(l);
  if (type == "BatchNorm") return BatchNorm(l);
  if (type == "Scale") return ScaleOrBias(l, true);
  if (type == "Bias") return ScaleOrBias(l, false);
  if (type == "Eltwise") return Eltwise(l);
  if (type == "Slice") return Slice(l);
  if (type == "Crop") return Crop(l);
  if (type == "Reduction") return Reduction(l);
  if (type == "ArgMax") return ArgMax(l);
  if (type == "MVN") return Mvn(l);
  if (type == "Embed") return Embed(l);
  if (type == "LSTM") return Recurrent(l, true);
  if (type == "RNN") return Recurrent(l, false);
  if (type == "Flatten") {
    const caffe::FlattenParameter& fp = lp.flatten_param();
    const Tensor& x = *net_.bottom_vecs()[l][0];
    const int axis = x.CanonicalAxisIndex(fp.axis());
    if (axis == 1 && x.CanonicalAxisIndex(fp.end_axis()) == x.num_axes() - 1) {
      SetAttr(Node(l, "Flatten", {In(l, 0)}, {Out(l, 0)}), "axis", int64_t{1});
      return;
    }
    return ReshapeLike(l, axis > 0);
  }
  if (type == "Reshape") {
    const caffe::ReshapeParameter& rp = lp.reshape_param();
    const bool keeps =
        rp.axis() > 0 || (rp.axis() == 0 && rp.shape().dim_size() > 0 && rp.shape().dim(0) == 0);
    return ReshapeLike(l, keeps);
  }
  if (type == "Parameter") {
    const Tensor& p = *net_.layers()[l]->blobs()[0];
    onnx::TensorProto* t = graph_->add_initializer();
    t->set_name(Out(l, 0));
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int d : p.shape()) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(p.cpu_data()),
                                static_cast<size_t>(p.count()) * sizeof(float)));
    // A value only initializers hold still needs a node to be a graph output.
    return;
  }
  if (type == "Dropout") {  // scale_train: false scales by the kept fraction at test time
    Node(l, "Mul", {In(l, 0), Scalar(l, "keep", 1.0f - lp.dropout_param().dropout_ratio())},
         {Out(l, 0)});
    return;
  }
  if (type == "ReLU") {
    const float slope = lp.relu_param().negative_slope();
    if (slope == 0.0f) {
      Node(l, "Relu", {In(l, 0)}, {Out(l, 0)});
    } else {
      SetAttr(Node(l, "LeakyRelu", {In(l, 0)}, {Out(l, 0)}), "alpha", slope);
    }
    return;
  }
  if (type == "PReLU") {
    const Tensor& x = *net_.bottom_vecs()[l][0];
    const Tensor& slope = *net_.layers()[l]->blobs()[0];
    Dims dims = {slope.count()};
    if (!lp.prelu_param().channel_shared()) dims = BroadcastDims(x, 1, 1);
    Node(l, "PRelu",
         {In(l, 0), FloatInit(net_.layer_names()[l] + "/slope", dims, slope.cpu_data())},
         {Out(l, 0)});
    return;
  }
  static const std::map<std::string, std::string> kUnary = {
      {"Sigmoid", "Sigmoid"}, {"TanH", "Tanh"}, {"AbsVal", "Abs"}, {"BNLL", "Softplus"}};
  if (auto it = kUnary.find(type); it != kUnary.end()) {
    Node(l, it->second, {In(l, 0)}, {Out(l, 0)});
    return;
  }
  if (type == "ELU") {
    SetAttr(Node(l, "Elu", {In(l, 0)}, {Out(l, 0)}), "alpha", lp.elu_param().alpha());
    return;
  }
  if (type == "Threshold") {  // 1 where x > threshold, else 0
    const std::string above = Temp(l, "above");
    Node(l, "Greater", {In(l, 0), Scalar(l, "threshold", lp.threshold_param().threshold())},
         {above});
    SetAttr(Node(l, "Cast", {above}, {Out(l, 0)}), "to", int64_t{onnx::TensorProto::FLOAT});
    return;
  }
  if (type == "Clip") {
    Node(l, "Clip",
         {In(l, 0), Scalar(l, "min", lp.clip_param().min()),
          Scalar(l, "max", lp.clip_param().max())},
         {Out(l, 0)});
    return;
  }
  if (type == "Swish") {  // x * sigmoid(beta x)
    std::string x = In(l, 0);
    const float beta = lp.swish_param().beta();
    if (beta != 1.0f) {
      const std::string scaled = Temp(l, "beta_x");
      Node(l, "Mul", {x, Scalar(l, "beta", beta)}, {scaled});
      x = scaled;
    }
    const std::string gate = Temp(l, "sigmoid");
    Node(l, "Sigmoid", {x}, {gate});
    Node(l, "Mul", {In(l, 0), gate}, {Out(l, 0)});
    return;
  }
  if (type == "Power") {  // (shift + scale x) ^ power
    const caffe::PowerParameter& pp = lp.power_param();
    std::string x = In(l, 0);
    Affine(l, pp.scale(), pp.shift(), &x);
    if (pp.power() != 1.0f) {
      const std::string y = Temp(l, "pow");
      Node(l, "Pow", {x, Scalar(l, "power", pp.power())}, {y});
      x = y;
    }
    Node(l, "Identity", {x}, {Out(l, 0)});
    return;
  }
  if (type == "Exp") {  // base ^ (shift + scale x) = e ^ (ln(base) (shift + scale x))
    const caffe::ExpParameter& ep = lp.exp_param();
    const float ln_base = ep.base() == -1.0f ? 1.0f : std::log(ep.base());
    std::string x = In(l, 0);
    Affine(l, ln_base * ep.scale(), ln_base * ep.shift(), &x);
    Node(l, "Exp", {x}, {Out(l, 0)});
    return;
  }
  if (type == "Log") {  // log_base(shift + scale x) = ln(shift + scale x) / ln(base)
    const caffe::LogParameter& gp = lp.log_param();
    std::string x = In(l, 0);
    Affine(l, gp.scale(), gp.shift(), &x);
    if (gp.base() == -1.0f) {
      Node(l, "Log", {x}, {Out(l, 0)});
    } else {
      const std::string ln = Temp(l, "ln");
      Node(l, "Log", {x}, {ln});
      Node(l, "Mul", {ln, Scalar(l, "inv_ln_base", 1.0f / std::log(gp.base()))}, {Out(l, 0)});
    }
    return;
  }
  if (type == "Softmax") {
    const Tensor& x = *net_.bottom_vecs()[l][0];
    SetAttr(Node(l, "Softmax", {In(l, 0)}, {Out(l, 0)}), "axis",
            int64_t{x.CanonicalAxisIndex(lp.softmax_param().axis())});
    return;
  }
  if (type == "Concat") {
    const Tensor& x = *net_.bottom_vecs()[l][0];
    const caffe::ConcatParameter& cp = lp.concat_param();
    const int axis =
        cp.has_concat_dim() ? static_cast<int>(cp.concat_dim()) : x.CanonicalAxisIndex(cp.axis());
    std::vector<std::string> ins;
    for (size_t b = 0; b < plan_[l].bottoms.size(); ++b) ins.push_back(In(l, static_cast<int>(b)));
    SetAttr(Node(l, "Concat", ins, {Out(l, 0)}), "axis", int64_t{axis});
    return;
  }
  if (type == "Tile") {
    const Tensor& x = *net_.bottom_vecs()[l][0];
    Dims repeats(x.num_axes(), 1);
    repeats[x.CanonicalAxisIndex(lp.tile_param().axis())] = lp.tile_param().tiles();
    Node(l, "Tile", {In(l, 0), Int64Init(net_.layer_names()[l] + "/repeats", repeats)},
         {Out(l, 0)});
    return;
  }
  if (type == "BatchReindex") {  // rows of bottom 0 picked by bottom 1's indices
    const std::string idx = Temp(l, "indices");
    SetAttr(Node(l, "Cast", {In(l, 1)}, {idx}), "to", int64_t{onnx::TensorProto::INT64});
    SetAttr(Node(l, "Gather", {In(l, 0), idx}, {Out(l, 0)}), "axis", int64_t{0});
    return;
  }
  static const std::map<std::string, std::string> kWhyNot = {
      {"SPP", "its pyramid of poolings depends on the input's size at run time"},
      {"Filter", "its output's size depends on the values of its selector"},
      {"Im2col", "ONNX has no operator that lays out convolution patches"},
      {"LSTMUnit", "it is one step of an unrolled LSTM; export the LSTM layer"},
      {"Python", "its computation is Python code"},
  };
  auto it = kWhyNot.find(type);
  Refuse(l, it != kWhyNot.end() ? it->second : "ONNX has no counterpart for it");
}

// x := shift + scale x, skipping the steps that change nothing.
void Exporter::Affine(int l, float scale, float shift, std::string* x) {
  if (scale != 1.0f) {
    const std::string y = Temp(l, "scaled");
    Node(l, "Mul", {*x, Scalar(l, "scale", scale)}, {y});
    *x = y;
  }
  if (shift != 0.0f) {
    const std::string y = Temp(l, "shifted");
    Node(l, "Add", {*x, Scalar(l, "shift", shift)}, {y});
    *x = y;
  }
}

void Exporter::Convolution(int l, bool transposed) {
  Layer& layer = *net_.layers()[l];
  const caffe::ConvolutionParameter& cp = layer.layer_param().convolution_param();
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const Tensor& y = *net_.top_vecs()[l][0];
  if (x.CanonicalAxisIndex(cp.axis()) != 1) Refuse(l, "ONNX convolutions take channels on axis 1");
  const int n = x.num_axes() - 2;
  auto pick = [&](const google::protobuf::RepeatedField<uint32_t>& list, bool has_hw, uint32_t h,
                  uint32_t w, int64_t fallback) {
    Dims v(n, fallback);
    if (has_hw) {
      v = {h, w};
    } else {
      for (int i = 0; i < n && list.size() > 0; ++i) v[i] = list.size() == 1 ? list[0] : list[i];
    }
    return v;
  };
  const Dims kernel = pick(cp.kernel_size(), cp.has_kernel_h(), cp.kernel_h(), cp.kernel_w(), 1);
  const Dims stride = pick(cp.stride(), cp.has_stride_h(), cp.stride_h(), cp.stride_w(), 1);
  const Dims pad = pick(cp.pad(), cp.has_pad_h(), cp.pad_h(), cp.pad_w(), 0);
  const Dims dilation = pick(cp.dilation(), false, 0, 0, 1);
  Dims pads = pad;
  pads.insert(pads.end(), pad.begin(), pad.end());
  for (int i = 0; i < n; ++i) {  // the output size ONNX computes is Caffe's
    const int64_t extent = dilation[i] * (kernel[i] - 1) + 1;
    const int64_t in = x.shape(2 + i);
    const int64_t out = transposed ? stride[i] * (in - 1) + extent - 2 * pad[i]
                                   : (in + 2 * pad[i] - extent) / stride[i] + 1;
    if (out != y.shape(2 + i)) {
      CORTADO_THROW(kInternal, "{}: spatial axis {} is {} in the net but {} in ONNX", Describe(l),
                    i, y.shape(2 + i), out);
    }
  }
  const Tensor& w = *layer.blobs()[0];
  std::vector<std::string> ins = {
      In(l, 0), FloatInit(net_.layer_names()[l] + "/weight", DimsOf(w), w.cpu_data())};
  if (cp.bias_term()) {
    const Tensor& b = *layer.blobs()[1];
    ins.push_back(FloatInit(net_.layer_names()[l] + "/bias", {b.count()}, b.cpu_data()));
  }
  onnx::NodeProto* node = Node(l, transposed ? "ConvTranspose" : "Conv", ins, {Out(l, 0)});
  SetAttr(node, "kernel_shape", kernel);
  SetAttr(node, "strides", stride);
  SetAttr(node, "pads", pads);
  SetAttr(node, "dilations", dilation);
  SetAttr(node, "group", int64_t{cp.group()});
}

// Caffe rounds the output size up (CEIL, its default), keeps the last window starting inside the
// padded input, and divides an average by the window's cells inside the padded input. The extra
// windows of the rounding become explicit padding at the end. An average pools a zero-padded copy
// of the input (a Pad node) with count_include_pad off, so that its divisor counts the padding
// but not the rounding's extra cells, whatever a runtime makes of count_include_pad on pads.
void Exporter::Pooling(int l) {
  const caffe::PoolingParameter& pp = net_.layers()[l]->layer_param().pooling_param();
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const Tensor& y = *net_.top_vecs()[l][0];
  if (net_.top_vecs()[l].size() > 1) Refuse(l, "ONNX pooling has no max-position mask top");
  if (pp.pool() == caffe::PoolingParameter::STOCHASTIC) {
    Refuse(l, "stochastic pooling has no ONNX counterpart");
  }
  if (x.num_axes() != 4) Refuse(l, "Caffe pools 4-D blobs only");
  const bool max = pp.pool() == caffe::PoolingParameter::MAX;
  if (pp.global_pooling()) {
    Node(l, max ? "GlobalMaxPool" : "GlobalAveragePool", {In(l, 0)}, {Out(l, 0)});
    return;
  }
  const Dims kernel = pp.has_kernel_h() ? Dims{pp.kernel_h(), pp.kernel_w()}
                                        : Dims{pp.kernel_size(), pp.kernel_size()};
  const Dims stride =
      pp.has_stride_h() ? Dims{pp.stride_h(), pp.stride_w()} : Dims{pp.stride(), pp.stride()};
  const Dims pad = pp.has_pad_h() ? Dims{pp.pad_h(), pp.pad_w()} : Dims{pp.pad(), pp.pad()};
  Dims extra(2, 0);
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x.shape(2 + i);
    const int64_t out = y.shape(2 + i);
    extra[i] = std::max<int64_t>(0, (out - 1) * stride[i] + kernel[i] - (in + 2 * pad[i]));
    if ((in + 2 * pad[i] + extra[i] - kernel[i]) / stride[i] + 1 != out) {
      CORTADO_THROW(kInternal, "{}: spatial axis {} is {} in the net, not ONNX's", Describe(l), i,
                    out);
    }
  }
  std::string input = In(l, 0);
  Dims pads = {pad[0], pad[1], pad[0] + extra[0], pad[1] + extra[1]};
  if (!max && (pad[0] > 0 || pad[1] > 0)) {
    input = ZeroPad(l, input, pad[0], pad[1]);
    pads = {0, 0, extra[0], extra[1]};
  }
  onnx::NodeProto* node = Node(l, max ? "MaxPool" : "AveragePool", {input}, {Out(l, 0)});
  SetAttr(node, "kernel_shape", kernel);
  SetAttr(node, "strides", stride);
  SetAttr(node, "pads", pads);
  if (!max) SetAttr(node, "count_include_pad", int64_t{0});
}

std::string Exporter::ZeroPad(int l, const std::string& input, int64_t pad_h, int64_t pad_w) {
  const std::string padded = Temp(l, "padded");
  Node(
      l, "Pad",
      {input, Int64Init(net_.layer_names()[l] + "/pads", {0, 0, pad_h, pad_w, 0, 0, pad_h, pad_w})},
      {padded});
  return padded;
}

void Exporter::InnerProduct(int l) {
  Layer& layer = *net_.layers()[l];
  const caffe::InnerProductParameter& ip = layer.layer_param().inner_product_param();
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const int axis = x.CanonicalAxisIndex(ip.axis());
  const int64_t k = x.count(axis);
  const int64_t n = ip.num_output();
  const Tensor& w = *layer.blobs()[0];
  const std::string name = net_.layer_names()[l];
  std::string bias;
  if (ip.bias_term()) {
    const Tensor& b = *layer.blobs()[1];
    bias = FloatInit(name + "/bias", {n}, b.cpu_data());
  }
  if (axis == 1) {  // Gemm on [N, K]
    std::string a = In(l, 0);
    if (x.num_axes() != 2) {
      a = Temp(l, "flat");
      SetAttr(Node(l, "Flatten", {In(l, 0)}, {a}), "axis", int64_t{1});
    }
    // W as N x K (transposed here when the layer keeps it K x N), the layout every runtime's
    // Gemm takes.
    std::vector<float> wn(w.cpu_data(), w.cpu_data() + k * n);
    if (ip.transpose()) {
      for (int64_t i = 0; i < k; ++i) {
        for (int64_t j = 0; j < n; ++j) wn[j * k + i] = w.cpu_data()[i * n + j];
      }
    }
    std::vector<std::string> ins = {a, FloatInit(name + "/weight", {n, k}, wn)};
    if (!bias.empty()) ins.push_back(bias);
    SetAttr(Node(l, "Gemm", ins, {Out(l, 0)}), "transB", int64_t{1});
    return;
  }
  // Other axes: MatMul over the leading axes kept as they are, with W laid out K x N.
  std::vector<float> wt(static_cast<size_t>(k * n));
  const float* wd = w.cpu_data();
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) wt[i * n + j] = ip.transpose() ? wd[i * n + j] : wd[j * k + i];
  }
  Dims lead;
  for (int i = 0; i < axis; ++i) lead.push_back(x.shape(i));
  lead.push_back(k);
  const std::string flat = Temp(l, "flat");
  Node(l, "Reshape", {In(l, 0), ShapeInit(l, lead, axis > 0)}, {flat});
  const std::string product = bias.empty() ? Out(l, 0) : Temp(l, "matmul");
  Node(l, "MatMul", {flat, FloatInit(name + "/weight", {k, n}, wt)}, {product});
  if (!bias.empty()) Node(l, "Add", {product, bias}, {Out(l, 0)});
}

void Exporter::Lrn(int l) {
  const caffe::LRNParameter& p = net_.layers()[l]->layer_param().lrn_param();
  if (p.norm_region() == caffe::LRNParameter::ACROSS_CHANNELS) {
    onnx::NodeProto* node = Node(l, "LRN", {In(l, 0)}, {Out(l, 0)});
    SetAttr(node, "size", int64_t{p.local_size()});
    SetAttr(node, "alpha", p.alpha());
    SetAttr(node, "beta", p.beta());
    SetAttr(node, "bias", p.k());
    return;
  }
  // Within a channel: x * (1 + alpha * avgpool_n(x^2))^-beta, every window n x n cells.
  const int64_t size = p.local_size();
  const int64_t pre = (size - 1) / 2;
  const std::string sq = Temp(l, "square");
  Node(l, "Mul", {In(l, 0), In(l, 0)}, {sq});
  const std::string avg = Temp(l, "average");
  const std::string padded = Temp(l, "padded");
  Node(l, "Pad",
       {sq, Int64Init(net_.layer_names()[l] + "/pads",
                      {0, 0, pre, pre, 0, 0, size - 1 - pre, size - 1 - pre})},
       {padded});
  SetAttr(Node(l, "AveragePool", {padded}, {avg}), "kernel_shape", Dims{size, size});
  std::string s = avg;
  Affine(l, p.alpha(), 1.0f, &s);
  const std::string scale = Temp(l, "scale");
  Node(l, "Pow", {s, Scalar(l, "minus_beta", -p.beta())}, {scale});
  Node(l, "Mul", {In(l, 0), scale}, {Out(l, 0)});
}

void Exporter::BatchNorm(int l) {
  Layer& layer = *net_.layers()[l];
  const caffe::BatchNormParameter& bp = layer.layer_param().batch_norm_param();
  if (bp.has_use_global_stats() && !bp.use_global_stats()) {
    Refuse(l, "use_global_stats: false normalises by each batch's own statistics");
  }
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const int64_t c = x.num_axes() > 1 ? x.shape(1) : 1;
  const float norm = layer.blobs()[2]->cpu_data()[0];
  const float factor = norm == 0.0f ? 0.0f : 1.0f / norm;
  std::vector<float> mean(c);
  std::vector<float> var(c);
  for (int64_t i = 0; i < c; ++i) {
    mean[i] = layer.blobs()[0]->cpu_data()[i] * factor;
    var[i] = layer.blobs()[1]->cpu_data()[i] * factor;
  }
  std::vector<float> gamma(c, 1.0f);
  std::vector<float> beta(c, 0.0f);
  std::string out = Out(l, 0);
  const int s = plan_[l].fold_scale;
  if (s >= 0) {
    Layer& scale = *net_.layers()[s];
    std::copy_n(scale.blobs()[0]->cpu_data(), c, gamma.begin());
    if (scale.layer_param().scale_param().bias_term()) {
      std::copy_n(scale.blobs()[1]->cpu_data(), c, beta.begin());
    }
    out = Out(s, 0);
  }
  const std::string name = net_.layer_names()[l];
  onnx::NodeProto* node =
      Node(l, "BatchNormalization",
           {In(l, 0), FloatInit(name + "/scale", {c}, gamma), FloatInit(name + "/bias", {c}, beta),
            FloatInit(name + "/mean", {c}, mean), FloatInit(name + "/var", {c}, var)},
           {out});
  SetAttr(node, "epsilon", bp.eps());
  if (s >= 0) node->set_doc_string("with " + Describe(s) + " folded in");
}

void Exporter::ScaleOrBias(int l, bool scale) {
  Layer& layer = *net_.layers()[l];
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const caffe::ScaleParameter& sp = layer.layer_param().scale_param();
  const caffe::BiasParameter& bp = layer.layer_param().bias_param();
  const int axis = x.CanonicalAxisIndex(scale ? sp.axis() : bp.axis());
  int num_axes = scale ? sp.num_axes() : bp.num_axes();
  const std::string name = net_.layer_names()[l];
  int next_blob = 0;
  std::string factor;
  if (plan_[l].bottoms.size() > 1) {  // the factors from bottom 1, shaped to broadcast
    const Tensor& f = *net_.bottom_vecs()[l][1];
    const int fa = x.CanonicalAxisIndex(scale ? sp.axis() : bp.axis());
    Dims dims = DimsOf(f);
    for (int i = fa + f.num_axes(); i < x.num_axes(); ++i) dims.push_back(1);
    factor = Temp(l, scale ? "factors" : "biases");
    Node(l, "Reshape", {In(l, 1), ShapeInit(l, dims, fa > 0)}, {factor});
  } else {
    const Tensor& f = *layer.blobs()[next_blob++];
    if (num_axes < 0) num_axes = x.num_axes() - axis;
    Dims dims = BroadcastDims(x, axis, f.num_axes() == 0 ? 0 : num_axes);
    factor = FloatInit(name + (scale ? "/scale" : "/bias"), dims, f.cpu_data());
  }
  const bool bias_term = scale && sp.bias_term();
  const std::string product = bias_term ? Temp(l, "scaled") : Out(l, 0);
  Node(l, scale ? "Mul" : "Add", {In(l, 0), factor}, {product});
  if (bias_term) {
    const Tensor& b = *layer.blobs()[next_blob];
    const int n = num_axes < 0 ? x.num_axes() - axis : num_axes;
    Node(l, "Add", {product, FloatInit(name + "/bias", BroadcastDims(x, axis, n), b.cpu_data())},
         {Out(l, 0)});
  }
}

void Exporter::Eltwise(int l) {
  const caffe::EltwiseParameter& ep = net_.layers()[l]->layer_param().eltwise_param();
  std::vector<std::string> ins;
  for (size_t b = 0; b < plan_[l].bottoms.size(); ++b) {
    std::string x = In(l, static_cast<int>(b));
    if (ep.operation() == caffe::EltwiseParameter::SUM && ep.coeff_size() > 0 &&
        ep.coeff(b) != 1.0f) {
      const std::string y = Temp(l, "term" + std::to_string(b));
      Node(l, "Mul", {x, Scalar(l, "coeff" + std::to_string(b), ep.coeff(b))}, {y});
      x = y;
    }
    ins.push_back(x);
  }
  switch (ep.operation()) {
    case caffe::EltwiseParameter::SUM:
      Node(l, ins.size() == 2 ? "Add" : "Sum", ins, {Out(l, 0)});
      break;
    case caffe::EltwiseParameter::MAX:
      Node(l, "Max", ins, {Out(l, 0)});
      break;
    case caffe::EltwiseParameter::PROD: {
      std::string acc = ins[0];
      for (size_t i = 1; i < ins.size(); ++i) {
        const std::string y = i + 1 == ins.size() ? Out(l, 0) : Temp(l, "product");
        Node(l, "Mul", {acc, ins[i]}, {y});
        acc = y;
      }
      break;
    }
  }
}

void Exporter::ReshapeLike(int l, bool keeps_batch) {
  Node(l, "Reshape", {In(l, 0), ShapeInit(l, DimsOf(*net_.top_vecs()[l][0]), keeps_batch)},
       {Out(l, 0)});
}

void Exporter::Slice(int l) {
  const caffe::SliceParameter& sp = net_.layers()[l]->layer_param().slice_param();
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const int axis =
      sp.has_slice_dim() ? static_cast<int>(sp.slice_dim()) : x.CanonicalAxisIndex(sp.axis());
  // One Slice node per top (Split's sizes became an input in opset 13, which fewer runtimes read).
  const std::string name = net_.layer_names()[l];
  const std::string axes = Int64Init(name + "/axes", {axis});
  int64_t start = 0;
  for (size_t t = 0; t < plan_[l].tops.size(); ++t) {
    const int64_t end = start + net_.top_vecs()[l][t]->shape(axis);
    Node(l, "Slice",
         {In(l, 0), Int64Init(name + "/starts", {start}), Int64Init(name + "/ends", {end}), axes},
         {Out(l, static_cast<int>(t))});
    start = end;
  }
  if (axis == 0) FixBatch(l, "it slices the batch axis");
}

void Exporter::Crop(int l) {
  const caffe::CropParameter& cp = net_.layers()[l]->layer_param().crop_param();
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const Tensor& y = *net_.top_vecs()[l][0];
  const int axis = x.CanonicalAxisIndex(cp.axis());
  Dims starts, ends, axes;
  for (int i = axis; i < x.num_axes(); ++i) {
    const int64_t offset = cp.offset_size() == 0   ? 0
                           : cp.offset_size() == 1 ? cp.offset(0)
                                                   : cp.offset(i - axis);
    starts.push_back(offset);
    ends.push_back(offset + y.shape(i));
    axes.push_back(i);
  }
  const std::string name = net_.layer_names()[l];
  Node(l, "Slice",
       {In(l, 0), Int64Init(name + "/starts", starts), Int64Init(name + "/ends", ends),
        Int64Init(name + "/axes", axes)},
       {Out(l, 0)});
  if (axis == 0) FixBatch(l, "it crops the batch axis");
}

void Exporter::Reduction(int l) {
  const caffe::ReductionParameter& rp = net_.layers()[l]->layer_param().reduction_param();
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const int axis = x.CanonicalAxisIndex(rp.axis());
  Dims axes;
  for (int i = axis; i < x.num_axes(); ++i) axes.push_back(i);
  const std::string reduced = rp.coeff() == 1.0f ? Out(l, 0) : Temp(l, "reduced");
  onnx::NodeProto* node = nullptr;
  switch (rp.operation()) {
    case caffe::ReductionParameter::SUM:  // axes are an input from opset 13 on
      node = Node(l, "ReduceSum", {In(l, 0), Int64Init(net_.layer_names()[l] + "/axes", axes)},
                  {reduced});
      break;
    case caffe::ReductionParameter::ASUM:
      node = Node(l, "ReduceL1", {In(l, 0)}, {reduced});
      break;
    case caffe::ReductionParameter::SUMSQ:
      node = Node(l, "ReduceSumSquare", {In(l, 0)}, {reduced});
      break;
    case caffe::ReductionParameter::MEAN:
      node = Node(l, "ReduceMean", {In(l, 0)}, {reduced});
      break;
  }
  if (node->op_type() != "ReduceSum") SetAttr(node, "axes", axes);
  SetAttr(node, "keepdims", int64_t{0});
  if (rp.coeff() != 1.0f) Node(l, "Mul", {reduced, Scalar(l, "coeff", rp.coeff())}, {Out(l, 0)});
  if (axis == 0) FixBatch(l, "it reduces the batch axis");
}

// Indices as floats, as Caffe gives them. Ties: Caffe puts the larger index first, ONNX the
// smaller one.
void Exporter::ArgMax(int l) {
  const caffe::ArgMaxParameter& ap = net_.layers()[l]->layer_param().argmax_param();
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const int64_t k = ap.top_k();
  const std::string name = net_.layer_names()[l];
  std::string in = In(l, 0);
  int64_t axis = 1;
  if (ap.has_axis()) {
    axis = x.CanonicalAxisIndex(ap.axis());
  } else if (x.num_axes() != 2) {
    in = Temp(l, "flat");
    SetAttr(Node(l, "Flatten", {In(l, 0)}, {in}), "axis", int64_t{1});
  }
  // With an axis the result is the top itself; without one it is N x k, reshaped below.
  const bool direct = ap.has_axis();
  std::string indices;
  std::string values;
  if (k == 1 && !ap.out_max_val()) {
    const std::string arg = Temp(l, "argmax");
    onnx::NodeProto* node = Node(l, "ArgMax", {in}, {arg});
    SetAttr(node, "axis", axis);
    SetAttr(node, "keepdims", int64_t{1});
    indices = direct ? Out(l, 0) : Temp(l, "indices");
    SetAttr(Node(l, "Cast", {arg}, {indices}), "to", int64_t{onnx::TensorProto::FLOAT});
  } else {
    const std::string top_values = direct && ap.out_max_val() ? Out(l, 0) : Temp(l, "values");
    const std::string top_indices = Temp(l, "topk_indices");
    onnx::NodeProto* node =
        Node(l, "TopK", {in, Int64Init(name + "/k", {k})}, {top_values, top_indices});
    SetAttr(node, "axis", axis);
    values = top_values;
    if (!(direct && ap.out_max_val())) {
      indices = direct ? Out(l, 0) : Temp(l, "indices");
      SetAttr(Node(l, "Cast", {top_indices}, {indices}), "to", int64_t{onnx::TensorProto::FLOAT});
    }
  }
  if (direct) return;
  // N x 1 (or 2) x k, then ones up to the bottom's number of axes (at least 3), as Caffe's top.
  Dims one = DimsOf(*net_.top_vecs()[l][0]);
  one[1] = 1;
  if (!ap.out_max_val()) {
    Node(l, "Reshape", {indices, ShapeInit(l, one, true)}, {Out(l, 0)});
    return;
  }
  const std::string i3 = Temp(l, "indices_shaped");
  const std::string v3 = Temp(l, "values_shaped");
  Node(l, "Reshape", {indices, ShapeInit(l, one, true)}, {i3});
  Node(l, "Reshape", {values, ShapeInit(l, one, true)}, {v3});
  SetAttr(Node(l, "Concat", {i3, v3}, {Out(l, 0)}), "axis", int64_t{1});
}

// (x - mean) / (sqrt(mean of squared deviations) + eps), over each sample's channel planes or the
// whole sample.
void Exporter::Mvn(int l) {
  const caffe::MVNParameter& mp = net_.layers()[l]->layer_param().mvn_param();
  const Tensor& x = *net_.bottom_vecs()[l][0];
  Dims axes;
  for (int i = mp.across_channels() ? 1 : 2; i < x.num_axes(); ++i) axes.push_back(i);
  auto mean_of = [&](const std::string& in, const std::string& what) {
    const std::string out = Temp(l, what);
    onnx::NodeProto* node = Node(l, "ReduceMean", {in}, {out});
    SetAttr(node, "axes", axes);
    SetAttr(node, "keepdims", int64_t{1});
    return out;
  };
  const std::string mean = mean_of(In(l, 0), "mean");
  if (!mp.normalize_variance()) {
    Node(l, "Sub", {In(l, 0), mean}, {Out(l, 0)});
    return;
  }
  const std::string dev = Temp(l, "deviation");
  Node(l, "Sub", {In(l, 0), mean}, {dev});
  const std::string sq = Temp(l, "squared");
  Node(l, "Mul", {dev, dev}, {sq});
  const std::string var = mean_of(sq, "variance");
  const std::string sd = Temp(l, "std");
  Node(l, "Sqrt", {var}, {sd});
  const std::string den = Temp(l, "denominator");
  Node(l, "Add", {sd, Scalar(l, "eps", mp.eps())}, {den});
  Node(l, "Div", {dev, den}, {Out(l, 0)});
}

void Exporter::Embed(int l) {
  Layer& layer = *net_.layers()[l];
  const caffe::EmbedParameter& ep = layer.layer_param().embed_param();
  const std::string name = net_.layer_names()[l];
  const Tensor& w = *layer.blobs()[0];
  const std::string idx = Temp(l, "indices");
  SetAttr(Node(l, "Cast", {In(l, 0)}, {idx}), "to", int64_t{onnx::TensorProto::INT64});
  const std::string rows = ep.bias_term() ? Temp(l, "rows") : Out(l, 0);
  SetAttr(Node(l, "Gather", {FloatInit(name + "/weight", DimsOf(w), w.cpu_data()), idx}, {rows}),
          "axis", int64_t{0});
  if (ep.bias_term()) {
    const Tensor& b = *layer.blobs()[1];
    Node(l, "Add", {rows, FloatInit(name + "/bias", {b.count()}, b.cpu_data())}, {Out(l, 0)});
  }
}

// Caffe's LSTM (blobs W_xc, b_c, W_hc; gates i, f, o, g) and RNN (W_xh, b_h, W_hh, W_ho, b_o;
// o_t = tanh(W_ho h_t + b_o) on top of the recurrence) as ONNX's LSTM (gates i, o, f, c) and RNN
// nodes. ONNX's have no sequence-continuation input: the export takes cont as Caffe's usual
// layout (0 at t = 0, 1 after: every stream of the batch one sequence from zero state).
void Exporter::Recurrent(int l, bool lstm) {
  Layer& layer = *net_.layers()[l];
  const caffe::RecurrentParameter& rp = layer.layer_param().recurrent_param();
  if (rp.expose_hidden()) Refuse(l, "expose_hidden: ONNX's states are not carried between runs");
  if (plan_[l].bottoms.size() > 2) Refuse(l, "ONNX's LSTM and RNN have no static input");
  const Tensor& x = *net_.bottom_vecs()[l][0];
  const int64_t h = rp.num_output();
  const int64_t in = x.count(2);
  const int64_t gates = lstm ? 4 : 1;
  const auto& blobs = layer.blobs();
  const size_t expected = lstm ? 3 : 5;
  if (blobs.size() != expected || blobs[0]->count() != gates * h * in ||
      blobs[2]->count() != gates * h * h) {
    CORTADO_THROW(kInternal, "{}: unexpected parameter blobs", Describe(l));
  }
  // Caffe's gate g of rows [g h, (g + 1) h) goes to ONNX's row block order[g].
  const std::vector<int> order = lstm ? std::vector<int>{0, 2, 1, 3} : std::vector<int>{0};
  auto reorder = [&](const float* src, int64_t cols) {
    std::vector<float> dst(static_cast<size_t>(gates * h * cols));
    for (int64_t g = 0; g < gates; ++g) {
      std::copy_n(src + g * h * cols, h * cols, dst.begin() + order[g] * h * cols);
    }
    return dst;
  };
  const std::string name = net_.layer_names()[l];
  std::vector<float> bias = reorder(blobs[1]->cpu_data(), 1);
  bias.resize(static_cast<size_t>(2 * gates * h), 0.0f);  // Wb then Rb (zero)
  std::string seq = In(l, 0);
  if (x.num_axes() != 3) {
    seq = Temp(l, "x");
    Node(l, "Reshape", {In(l, 0), Int64Init(name + "/x_shape", {0, 0, in})}, {seq});
  }
  const std::string y = Temp(l, "y");
  onnx::NodeProto* node =
      Node(l, lstm ? "LSTM" : "RNN",
           {seq, FloatInit(name + "/W", {1, gates * h, in}, reorder(blobs[0]->cpu_data(), in)),
            FloatInit(name + "/R", {1, gates * h, h}, reorder(blobs[2]->cpu_data(), h)),
            FloatInit(name + "/B", {1, 2 * gates * h}, bias)},
           {y});
  SetAttr(node, "hidden_size", h);
  node->set_doc_string("cont taken as 0 at t = 0 and 1 after: each stream one sequence");
  const std::string hs = lstm ? Out(l, 0) : Temp(l, "h");
  // Y is T x 1 x N x H (one direction): T x N x H by a Reshape, which more runtimes read than
  // opset 13's Squeeze with its axes as an input.
  Node(l, "Reshape", {y, Int64Init(name + "/y_shape", {0, -1, h})}, {hs});
  if (lstm) return;
  std::vector<float> who(static_cast<size_t>(h * h));  // W_ho transposed, for h_t W_ho^T
  for (int64_t i = 0; i < h; ++i) {
    for (int64_t j = 0; j < h; ++j) who[j * h + i] = blobs[3]->cpu_data()[i * h + j];
  }
  const std::string proj = Temp(l, "W_ho_h");
  Node(l, "MatMul", {hs, FloatInit(name + "/W_ho", {h, h}, who)}, {proj});
  const std::string pre = Temp(l, "o_input");
  Node(l, "Add", {proj, FloatInit(name + "/b_o", {h}, blobs[4]->cpu_data())}, {pre});
  Node(l, "Tanh", {pre}, {Out(l, 0)});
}

}  // namespace

onnx::ModelProto ExportOnnx(const Net& net, const OnnxExportOptions& options) {
  return Exporter(net, options).Run();
}

}  // namespace cortado
