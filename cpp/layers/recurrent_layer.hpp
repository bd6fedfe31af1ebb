// SPDX-License-Identifier: Apache-2.0
// RecurrentLayer: the base of Caffe's recurrent layers (LSTM, RNN; Caffe's RecurrentLayer).
// Not a layer type of its own: a subclass describes one time step's architecture
// (FillUnrolledNet) and this class unrolls it over the T time steps of its input into an
// internal Net, which does the work.
//
// Params (recurrent_param): num_output (D, required, > 0), weight_filler and bias_filler
// (default constant 0, as Caffe), debug_info (default false: log the unrolled net's blob
// magnitudes after each pass), expose_hidden (default false).
// Bottoms: x (T x N x ...), the input at each time step for N independent streams; cont
// (T x N), the sequence continuation indicators (0 starts a new sequence: the state carried in
// from t-1 is multiplied by cont_t); optionally x_static (N x ...), an input shared by all time
// steps; and with expose_hidden the initial states (subclass: LSTM h_0, c_0; RNN h_0), each
// 1 x N x D. x_static is present when there is one bottom more than those.
// Tops: the output (T x N x D), and with expose_hidden the final states (LSTM h_T, c_T; RNN
// h_T), each 1 x N x D.
// State: without expose_hidden the final states of one Forward are the initial states of the
// next (Caffe's carry-over; cont = 0 at t = 0 ignores them); Reset() zeroes them.
// Backward: through time, within the T steps; to x, x_static and the learnable parameters. No
// gradient reaches cont (asking for one is an error, as in Caffe).
// Blobs: the unrolled net's parameters, each once, in the order its layers own them; the
// unrolled net uses these very tensors, so solvers, snapshots and .caffemodel files see them.
// T is fixed at Setup (a Reshape to another T is an error); N may change.
//
// Differences from Caffe: with expose_hidden, Caffe leaves the diffs of the initial-state
// bottoms unwritten and ignores the diffs of the final-state tops; here both take part in
// Backward (the initial states receive their true gradients, and gradients arriving at the
// final states flow back through time). The unrolled net's pseudo-losses (which only mark
// what needs backward and never run) are Power layers here rather than Reduction.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class Net;

class RecurrentLayer : public Layer {
 public:
  RecurrentLayer(const caffe::LayerParameter& param, Context* ctx);
  ~RecurrentLayer() override;

  int MinBottomBlobs() const override;
  int MaxBottomBlobs() const override { return MinBottomBlobs() + 1; }
  int ExactNumTopBlobs() const override;
  bool AllowForceBackward(int bottom_index) const override { return bottom_index != 1; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

  // Zeroes the state carried from one Forward into the next (Caffe's Reset).
  void Reset();
  // The unrolled net (after Initialize), for inspection.
  const Net& unrolled_net() const { return *unrolled_net_; }

 protected:
  // Names, in the unrolled net, of the initial-state inputs (h_0, ...) and of the matching
  // final states; they are the extra bottoms and tops with expose_hidden, in this order.
  virtual std::vector<std::string> RecurrentInputBlobNames() const = 0;
  virtual std::vector<std::string> RecurrentOutputBlobNames() const = 0;
  // Name of the T x N x D output blob of the unrolled net.
  virtual std::string OutputBlobName() const = 0;
  // Adds the layers of the unrolled net. The net already has an Input layer with tops "x",
  // "cont" and (static_input_) "x_static"; the subclass adds an Input layer for the recurrent
  // inputs (each 1 x N_ x D), and the layers computing the output and the final states. The
  // final states must be blobs no layer consumes (the base class adds its pseudo-losses).
  virtual void FillUnrolledNet(caffe::NetParameter* net_param) const = 0;

  // D (recurrent_param.num_output).
  int num_output() const { return static_cast<int>(param_.recurrent_param().num_output()); }

  // Helpers for FillUnrolledNet.
  static caffe::LayerParameter* AddLayer(caffe::NetParameter* net, const std::string& name,
                                         const std::string& type,
                                         const std::vector<std::string>& bottoms,
                                         const std::vector<std::string>& tops);
  // An InnerProduct on `axis` with recurrent_param's fillers; param_names name its weight and,
  // when there are two, its bias (the bias term is on exactly then).
  caffe::LayerParameter* AddInnerProduct(caffe::NetParameter* net, const std::string& name,
                                         const std::string& bottom, const std::string& top,
                                         int num_outputs, int axis,
                                         const std::vector<std::string>& param_names) const;
  // The layers LSTM and RNN share, in Caffe's order: an Input layer for the recurrent inputs
  // (1 x N x D each), the slices cont_1 .. cont_T of cont, the input transform
  // `w_x`_x = w_x * x + b (weights `w_x`, bias `b`; gate_dim outputs) sliced into
  // `w_x`_x_1 .. `w_x`_x_T, and with a static input `w_x`_x_static = w_static * x_static,
  // shaped 1 x N x gate_dim.
  void AddCommonLayers(caffe::NetParameter* net, int gate_dim, const std::string& w_x,
                       const std::string& b, const std::string& w_static) const;
  // The Scale layer h_conted_{t-1} = cont_t * h_{t-1}. With expose_hidden, the layer that
  // consumes h_conted_0 must propagate_down to it (h_0's gradient comes from there).
  void AddContGate(caffe::NetParameter* net, int t) const;

  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  // The unrolled net's layers run on this layer's context, so the GPU passes are the CPU ones.
  void ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;

  int T_ = 0;  // time steps
  int N_ = 0;  // streams
  bool static_input_ = false;
  bool expose_hidden_ = false;

 private:
  int NumRecurrentBlobs() const { return static_cast<int>(RecurrentInputBlobNames().size()); }
  // Checks the bottoms' shapes against T_ (and, after Setup, the input sizes), naming them.
  void CheckShapes(const std::vector<Tensor*>& bottom) const;
  // Makes the unrolled net's parameter tensors use blobs_' data and diff again (the outer net
  // may have given blobs_ other buffers: flat gradients, ShareTrainedLayersWith).
  void ShareParams();
  // Points the unrolled net's inputs at the bottoms' data (cont is copied) and the tops at its
  // outputs.
  void ShareInputsAndOutputs(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top);
  void RunForward(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top);
  void RunBackward(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom);
  void LogDebugInfo(bool forward) const;

  std::unique_ptr<Net> unrolled_net_;
  int last_layer_index_ = 0;   // the last layer to run; the pseudo-losses follow it
  int h0_gate_layer_ = -1;     // with expose_hidden: the layer h_conted_0 = cont_1 * h_0
  int input_dim_ = 0;          // x.count(2), fixed by W's shape
  int static_dim_ = 0;         // x_static.count(1)
  Tensor* x_input_ = nullptr;  // unrolled net's "x"
  Tensor* cont_input_ = nullptr;
  Tensor* x_static_input_ = nullptr;
  std::vector<Tensor*> recur_inputs_;
  std::vector<Tensor*> recur_outputs_;
  Tensor* output_ = nullptr;
  std::vector<int> owner_param_ids_;  // unrolled net's params() index of each of blobs_
  // Diff buffers for inputs that take no gradient this pass (propagate_down false), so the
  // unrolled net does not write the bottoms' diffs then. One per input: x, x_static, states.
  std::vector<std::unique_ptr<Tensor>> discarded_diffs_;
};

}  // namespace cortado
