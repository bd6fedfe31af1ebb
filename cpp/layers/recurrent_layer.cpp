// SPDX-License-Identifier: Apache-2.0
// The unrolling follows Caffe's recurrent_layer.cpp: an Input layer for x, cont (and
// x_static), the subclass's layers, and a pseudo-loss on each output so the unrolled net runs
// backward where it should; the pseudo-losses themselves never run.
#include "layers/recurrent_layer.hpp"

#include <fmt/format.h>

#include "core/logging.hpp"
#include "math/on_device.hpp"
#include "net/net.hpp"

namespace cortado {

RecurrentLayer::RecurrentLayer(const caffe::LayerParameter& param, Context* ctx)
    : Layer(param, ctx) {}

RecurrentLayer::~RecurrentLayer() = default;

int RecurrentLayer::MinBottomBlobs() const {
  return 2 + (param_.recurrent_param().expose_hidden() ? NumRecurrentBlobs() : 0);
}

int RecurrentLayer::ExactNumTopBlobs() const {
  return 1 + (param_.recurrent_param().expose_hidden() ? NumRecurrentBlobs() : 0);
}

void RecurrentLayer::CheckShapes(const std::vector<Tensor*>& bottom) const {
  const Tensor& x = *bottom[0];
  const Tensor& cont = *bottom[1];
  if (x.num_axes() < 2) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: x (bottom 0) must have at least 2 axes (T x N x ...), got shape [{}]",
                  Describe(), x.ShapeString());
  }
  if (x.shape(0) != T_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: x (bottom 0) has shape [{}], {} time steps, but the layer was set up for "
                  "T = {}; the unrolled net cannot change its number of time steps",
                  Describe(), x.ShapeString(), x.shape(0), T_);
  }
  if (cont.num_axes() != 2 || cont.shape(0) != x.shape(0) || cont.shape(1) != x.shape(1)) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: cont (bottom 1) has shape [{}]; it must be T x N = {} x {}, the first two "
                  "axes of x (bottom 0, shape [{}])",
                  Describe(), cont.ShapeString(), x.shape(0), x.shape(1), x.ShapeString());
  }
  const int n = x.shape(1);
  if (input_dim_ > 0 && x.count(2) != input_dim_) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: x (bottom 0) has shape [{}], {} values per time step and stream, but the "
                  "weights were set up for {}",
                  Describe(), x.ShapeString(), x.count(2), input_dim_);
  }
  if (static_input_) {
    const Tensor& s = *bottom[2];
    if (s.num_axes() < 1 || s.shape(0) != n) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: x_static (bottom 2) has shape [{}]; its first axis must be N = {}, the "
                    "number of streams of x (bottom 0, shape [{}])",
                    Describe(), s.ShapeString(), n, x.ShapeString());
    }
    if (static_dim_ > 0 && s.count(1) != static_dim_) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: x_static (bottom 2) has shape [{}], {} values per stream, but the "
                    "weights were set up for {}",
                    Describe(), s.ShapeString(), s.count(1), static_dim_);
    }
  }
  if (expose_hidden_) {
    const std::vector<std::string> names = RecurrentInputBlobNames();
    const int offset = 2 + (static_input_ ? 1 : 0);
    const std::vector<int> expected = {1, n, num_output()};
    for (size_t j = 0; j < names.size(); ++j) {
      const Tensor& h = *bottom[offset + j];
      if (h.shape() != expected) {
        CORTADO_THROW(kInvalidArgument,
                      "{}: initial state {} (bottom {}) has shape [{}]; expected 1 x N x "
                      "num_output = 1 x {} x {}",
                      Describe(), names[j], offset + j, h.ShapeString(), n, num_output());
      }
    }
  }
}

void RecurrentLayer::Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const caffe::RecurrentParameter& rp = param_.recurrent_param();
  if (rp.num_output() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: recurrent_param.num_output must be positive", Describe());
  }
  expose_hidden_ = rp.expose_hidden();
  const int num_recur = NumRecurrentBlobs();
  static_input_ = static_cast<int>(bottom.size()) > 2 + (expose_hidden_ ? num_recur : 0);
  if (bottom[0]->num_axes() < 2) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: x (bottom 0) must have at least 2 axes (T x N x ...), got shape [{}]",
                  Describe(), bottom[0]->ShapeString());
  }
  T_ = bottom[0]->shape(0);
  if (T_ < 1) {
    CORTADO_THROW(kInvalidArgument, "{}: x (bottom 0) has shape [{}]: no time steps", Describe(),
                  bottom[0]->ShapeString());
  }
  input_dim_ = 0;
  static_dim_ = 0;
  CheckShapes(bottom);
  N_ = bottom[0]->shape(1);
  CORTADO_LOG_DEBUG("{}: unrolling {} time steps of {} independent streams", Describe(), T_, N_);

  // The unrolled net: inputs, the architecture, pseudo-losses.
  caffe::NetParameter net_param;
  net_param.set_name(name() + " (unrolled)");
  net_param.mutable_state()->set_phase(phase());
  caffe::LayerParameter* input = net_param.add_layer();
  input->set_name("input");
  input->set_type("Input");
  auto add_input = [&](const char* blob, const Tensor& like) {
    input->add_top(blob);
    caffe::BlobShape* shape = input->mutable_input_param()->add_shape();
    for (int d : like.shape()) shape->add_dim(d);
  };
  add_input("x", *bottom[0]);
  add_input("cont", *bottom[1]);
  if (static_input_) add_input("x_static", *bottom[2]);
  FillUnrolledNet(&net_param);
  if (!name().empty()) {
    for (caffe::LayerParameter& layer : *net_param.mutable_layer()) {
      layer.set_name(name() + "_" + layer.name());
    }
  }
  // Each output is marked as feeding a loss, so the layers computing it run backward (Caffe
  // adds Reduction layers; any layer with a loss weight does, as these never run).
  std::vector<std::string> outputs = {OutputBlobName()};
  for (const std::string& out : RecurrentOutputBlobNames()) outputs.push_back(out);
  std::vector<std::string> pseudo_losses;
  for (const std::string& out : outputs) {
    caffe::LayerParameter* loss = net_param.add_layer();
    pseudo_losses.push_back(name() + "_" + out + "_pseudoloss");
    loss->set_name(pseudo_losses.back());
    loss->set_type("Power");
    loss->add_bottom(out);
    loss->add_top(out + "_pseudoloss");
    loss->add_loss_weight(1.0f);
  }
  NetOptions options;
  options.fuse = false;
  options.share_buffers = false;
  WithContext(Describe() + ": building the unrolled net",
              [&] { unrolled_net_ = std::make_unique<Net>(net_param, ctx_, options); });
  const Net& net = *unrolled_net_;

  x_input_ = net.blob_by_name("x");
  cont_input_ = net.blob_by_name("cont");
  x_static_input_ = static_input_ ? net.blob_by_name("x_static") : nullptr;
  recur_inputs_.clear();
  recur_outputs_.clear();
  for (const std::string& in : RecurrentInputBlobNames()) {
    recur_inputs_.push_back(net.blob_by_name(in));
  }
  for (const std::string& out : RecurrentOutputBlobNames()) {
    recur_outputs_.push_back(net.blob_by_name(out));
  }
  output_ = net.blob_by_name(OutputBlobName());
  CORTADO_CHECK_EQ(net.input_blobs().size(),
                   static_cast<size_t>(2 + num_recur + (static_input_ ? 1 : 0)), "{}", Describe());

  // This layer's blobs are the unrolled net's parameters, each once (through its owner).
  blobs_.clear();
  owner_param_ids_.clear();
  for (size_t i = 0; i < net.params().size(); ++i) {
    if (net.param_owners()[i] == -1) {
      owner_param_ids_.push_back(static_cast<int>(i));
      blobs_.push_back(net.params()[i]);
    }
  }
  param_propagate_down_.assign(blobs_.size(), true);

  const int num_layers = static_cast<int>(net.layers().size());
  last_layer_index_ = num_layers - 1 - static_cast<int>(pseudo_losses.size());
  for (size_t j = 0; j < pseudo_losses.size(); ++j) {
    CORTADO_CHECK_EQ(net.layer_names()[last_layer_index_ + 1 + j], pseudo_losses[j], "{}",
                     Describe());
  }
  // With expose_hidden, h_0's gradient is cont_1 times h_conted_0's. The net cannot run that
  // Scale layer backward by itself (nothing before it needs backward), so RunBackward does.
  h0_gate_layer_ = -1;
  if (expose_hidden_) {
    const std::string gate = name().empty() ? "h_conted_0" : name() + "_h_conted_0";
    for (int i = 0; i <= last_layer_index_; ++i) {
      if (net.layer_names()[i] == gate) h0_gate_layer_ = i;
    }
    CORTADO_CHECK(h0_gate_layer_ >= 0, "{}: no layer '{}' in the unrolled net", Describe(), gate);
  }
  input_dim_ = bottom[0]->count(2);
  static_dim_ = static_input_ ? bottom[2]->count(1) : 0;
  discarded_diffs_.clear();
  for (int k = 0; k < 1 + (static_input_ ? 1 : 0) + num_recur; ++k) {
    discarded_diffs_.push_back(std::make_unique<Tensor>());
  }
  (void)top;
}

void RecurrentLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  CheckShapes(bottom);
  N_ = bottom[0]->shape(1);
  x_input_->ReshapeLike(*bottom[0]);
  cont_input_->ReshapeLike(*bottom[1]);
  if (static_input_) x_static_input_->ReshapeLike(*bottom[2]);
  for (Tensor* in : recur_inputs_) in->Reshape({1, N_, num_output()});
  // The inputs first: layers that alias their bottom (a one-top Slice) then alias these.
  ShareInputsAndOutputs(bottom, {});
  unrolled_net_->Reshape();
  top[0]->ReshapeLike(*output_);
  for (size_t j = 0; j < recur_outputs_.size() && expose_hidden_; ++j) {
    top[1 + j]->ReshapeLike(*recur_outputs_[j]);
  }
  ShareInputsAndOutputs(bottom, top);
}

void RecurrentLayer::Reset() {
  for (Tensor* out : recur_outputs_) {
    math::dev::Set(*ctx_, out->count(), 0.0f, math::dev::MutableData(*ctx_, *out));
  }
}

void RecurrentLayer::ShareParams() {
  const auto& params = unrolled_net_->params();
  for (size_t i = 0; i < blobs_.size(); ++i) {
    Tensor* inner = params[owner_param_ids_[i]].get();
    if (inner == blobs_[i].get()) continue;
    // Someone put another tensor in blobs(): the unrolled net follows it.
    if (inner->shape() != blobs_[i]->shape()) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: parameter blob {} has shape [{}] but the unrolled net needs [{}]",
                    Describe(), i, blobs_[i]->ShapeString(), inner->ShapeString());
    }
    inner->ShareData(*blobs_[i]);
    inner->ShareDiff(*blobs_[i]);
  }
  const auto& owners = unrolled_net_->param_owners();
  for (size_t k = 0; k < params.size(); ++k) {
    if (owners[k] < 0) continue;
    Tensor& owner = *params[owners[k]];
    if (params[k]->data() != owner.data()) params[k]->ShareData(owner);
    if (params[k]->diff() != owner.diff()) params[k]->ShareDiff(owner);
  }
}

void RecurrentLayer::ShareInputsAndOutputs(const std::vector<Tensor*>& bottom,
                                           const std::vector<Tensor*>& top) {
  // cont is copied in Forward (T x N values), so the unrolled net's slices of it never alias a
  // buffer the outer net may later replace.
  x_input_->ShareData(*bottom[0]);
  if (static_input_) x_static_input_->ShareData(*bottom[2]);
  if (expose_hidden_) {
    const int offset = 2 + (static_input_ ? 1 : 0);
    for (size_t j = 0; j < recur_inputs_.size(); ++j) {
      recur_inputs_[j]->ShareData(*bottom[offset + j]);
    }
  }
  if (top.empty()) return;
  top[0]->ShareData(*output_);
  top[0]->ShareDiff(*output_);
  for (size_t j = 0; j < recur_outputs_.size() && expose_hidden_; ++j) {
    top[1 + j]->ShareData(*recur_outputs_[j]);
  }
}

void RecurrentLayer::RunForward(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  Context& ctx = *ctx_;
  ShareParams();
  ShareInputsAndOutputs(bottom, top);
  math::dev::Copy(ctx, bottom[1]->count(), math::dev::Data(ctx, *bottom[1]),
                  math::dev::MutableData(ctx, *cont_input_));
  if (!expose_hidden_) {
    // The state at time step T of the previous Forward starts this one (Caffe's carry-over).
    for (size_t j = 0; j < recur_inputs_.size(); ++j) {
      math::dev::Copy(ctx, recur_inputs_[j]->count(), math::dev::Data(ctx, *recur_outputs_[j]),
                      math::dev::MutableData(ctx, *recur_inputs_[j]));
    }
  }
  unrolled_net_->ForwardFromTo(0, last_layer_index_ + 1);
  if (param_.recurrent_param().debug_info()) LogDebugInfo(true);
}

void RecurrentLayer::RunBackward(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  if (propagate_down[1]) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: cannot backpropagate to the sequence continuation indicators (bottom 1, "
                  "cont); set propagate_down: false for it",
                  Describe());
  }
  Context& ctx = *ctx_;
  ShareParams();
  // Input gradients go to the bottoms that want them, else to buffers of our own.
  int discard = 0;
  auto route = [&](Tensor* inner, Tensor* outer, bool wanted) {
    Tensor* target = discarded_diffs_[discard++].get();
    if (wanted) {
      target = outer;
    } else {
      target->ReshapeLike(*inner);
    }
    if (inner->diff() != target->diff()) inner->ShareDiff(*target);
  };
  route(x_input_, bottom[0], propagate_down[0]);
  if (static_input_) route(x_static_input_, bottom[2], propagate_down[2]);
  const int offset = 2 + (static_input_ ? 1 : 0);
  for (size_t j = 0; j < recur_inputs_.size(); ++j) {
    // Without expose_hidden the initial states take no gradient (no layer computes one).
    route(recur_inputs_[j], expose_hidden_ ? bottom[offset + j] : nullptr,
          expose_hidden_ && propagate_down[offset + j]);
  }
  if (top[0]->diff() != output_->diff()) {
    math::dev::Copy(ctx, output_->count(), math::dev::Diff(ctx, *top[0]),
                    math::dev::MutableDiff(ctx, *output_));
  }
  for (size_t j = 0; j < recur_outputs_.size(); ++j) {
    // Gradients do not cross from one Forward to the next; with expose_hidden those arriving
    // at the final-state tops flow back through time.
    float* diff = math::dev::MutableDiff(ctx, *recur_outputs_[j]);
    if (expose_hidden_) {
      math::dev::Copy(ctx, recur_outputs_[j]->count(), math::dev::Diff(ctx, *top[1 + j]), diff);
    } else {
      math::dev::Set(ctx, recur_outputs_[j]->count(), 0.0f, diff);
    }
  }
  unrolled_net_->BackwardFromTo(last_layer_index_, 0);
  if (expose_hidden_ && propagate_down[offset]) {
    Layer& gate = *unrolled_net_->layers()[h0_gate_layer_];
    gate.Backward(unrolled_net_->top_vecs()[h0_gate_layer_], {true, false},
                  unrolled_net_->bottom_vecs()[h0_gate_layer_]);
  }
  if (param_.recurrent_param().debug_info()) LogDebugInfo(false);
}

void RecurrentLayer::LogDebugInfo(bool forward) const {
  // As Caffe's Net debug_info: the mean absolute value of each blob written.
  const Net& net = *unrolled_net_;
  auto mean_abs = [](const Tensor& t, bool diff) {
    if (t.count() == 0) return 0.0f;
    return (diff ? t.asum_diff() : t.asum_data()) / static_cast<float>(t.count());
  };
  for (int i = 0; i <= last_layer_index_; ++i) {
    const std::string& layer = net.layer_names()[i];
    if (forward) {
      for (size_t t = 0; t < net.top_vecs()[i].size(); ++t) {
        CORTADO_LOG_INFO("{}: [Forward] Layer {}, top blob {} data: {}", Describe(), layer,
                         net.blob_names()[net.top_ids(i)[t]],
                         mean_abs(*net.top_vecs()[i][t], false));
      }
      continue;
    }
    // A fused layer's gradients are its host's work (a folded Split writes no bottom diff).
    if (!net.layer_need_backward()[i] || net.layers()[i]->fused_into() != nullptr) continue;
    for (size_t b = 0; b < net.bottom_vecs()[i].size(); ++b) {
      if (!net.bottom_need_backward()[i][b]) continue;
      CORTADO_LOG_INFO("{}: [Backward] Layer {}, bottom blob {} diff: {}", Describe(), layer,
                       net.blob_names()[net.bottom_ids(i)[b]],
                       mean_abs(*net.bottom_vecs()[i][b], true));
    }
  }
  if (forward) return;
  for (size_t i = 0; i < blobs_.size(); ++i) {
    CORTADO_LOG_INFO("{}: [Backward] param {} ({}) diff: {}", Describe(), i,
                     net.param_display_names()[owner_param_ids_[i]], mean_abs(*blobs_[i], true));
  }
}

void RecurrentLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  RunForward(bottom, top);
}

void RecurrentLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  RunBackward(top, propagate_down, bottom);
}

void RecurrentLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                                const std::vector<Tensor*>& top) {
  RunForward(bottom, top);
}

void RecurrentLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                 const std::vector<bool>& propagate_down,
                                 const std::vector<Tensor*>& bottom) {
  RunBackward(top, propagate_down, bottom);
}

caffe::LayerParameter* RecurrentLayer::AddLayer(caffe::NetParameter* net, const std::string& name,
                                                const std::string& type,
                                                const std::vector<std::string>& bottoms,
                                                const std::vector<std::string>& tops) {
  caffe::LayerParameter* layer = net->add_layer();
  layer->set_name(name);
  layer->set_type(type);
  for (const std::string& b : bottoms) layer->add_bottom(b);
  for (const std::string& t : tops) layer->add_top(t);
  return layer;
}

caffe::LayerParameter* RecurrentLayer::AddInnerProduct(
    caffe::NetParameter* net, const std::string& name, const std::string& bottom,
    const std::string& top, int num_outputs, int axis,
    const std::vector<std::string>& param_names) const {
  caffe::LayerParameter* layer = AddLayer(net, name, "InnerProduct", {bottom}, {top});
  caffe::InnerProductParameter* ip = layer->mutable_inner_product_param();
  ip->set_num_output(num_outputs);
  ip->set_axis(axis);
  const bool bias = param_names.size() > 1;
  ip->set_bias_term(bias);
  *ip->mutable_weight_filler() = param_.recurrent_param().weight_filler();
  if (bias) *ip->mutable_bias_filler() = param_.recurrent_param().bias_filler();
  for (const std::string& p : param_names) layer->add_param()->set_name(p);
  return layer;
}

void RecurrentLayer::AddCommonLayers(caffe::NetParameter* net, int gate_dim, const std::string& w_x,
                                     const std::string& b, const std::string& w_static) const {
  const int d = num_output();
  caffe::LayerParameter* states = AddLayer(net, "recurrent_input", "Input", {}, {});
  for (const std::string& in : RecurrentInputBlobNames()) {
    states->add_top(in);
    caffe::BlobShape* shape = states->mutable_input_param()->add_shape();
    shape->add_dim(1);
    shape->add_dim(N_);
    shape->add_dim(d);
  }
  caffe::LayerParameter* cont_slice = AddLayer(net, "cont_slice", "Slice", {"cont"}, {});
  cont_slice->mutable_slice_param()->set_axis(0);
  for (int t = 1; t <= T_; ++t) cont_slice->add_top(fmt::format("cont_{}", t));

  // The input's contribution for all time steps at once: w_x * x + b.
  const std::string x_part = w_x + "_x";
  AddInnerProduct(net, "x_transform", "x", x_part, gate_dim, 2, {w_x, b})->add_propagate_down(true);
  if (static_input_) {
    // The static input's contribution, shaped as one time step: w_static * x_static.
    AddInnerProduct(net, x_part + "_static", "x_static", x_part + "_static_preshape", gate_dim, 1,
                    {w_static})
        ->add_propagate_down(true);
    caffe::LayerParameter* reshape = AddLayer(net, x_part + "_static_reshape", "Reshape",
                                              {x_part + "_static_preshape"}, {x_part + "_static"});
    caffe::BlobShape* shape = reshape->mutable_reshape_param()->mutable_shape();
    shape->add_dim(1);
    shape->add_dim(-1);  // N, inferred, so the batch size may change
    shape->add_dim(gate_dim);
  }
  caffe::LayerParameter* x_slice = AddLayer(net, x_part + "_slice", "Slice", {x_part}, {});
  x_slice->mutable_slice_param()->set_axis(0);
  for (int t = 1; t <= T_; ++t) x_slice->add_top(fmt::format("{}_{}", x_part, t));
}

void RecurrentLayer::AddContGate(caffe::NetParameter* net, int t) const {
  // h_conted_{t-1} = cont_t * h_{t-1}: a new sequence (cont_t = 0) starts from a zero state.
  caffe::LayerParameter* gate = AddLayer(net, fmt::format("h_conted_{}", t - 1), "Scale",
                                         {fmt::format("h_{}", t - 1), fmt::format("cont_{}", t)},
                                         {fmt::format("h_conted_{}", t - 1)});
  gate->mutable_scale_param()->set_axis(0);
}

}  // namespace cortado
