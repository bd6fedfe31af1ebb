// SPDX-License-Identifier: Apache-2.0
// The unrolled RNN follows Caffe's rnn_layer.cpp layer for layer (so the parameters, their
// order and their fillers are Caffe's); only the final-state copy differs (see below).
#include "layers/rnn_layer.hpp"

#include <fmt/format.h>

namespace cortado {

void RNNLayer::FillUnrolledNet(caffe::NetParameter* net) const {
  const int d = num_output();
  AddCommonLayers(net, d, "W_xh", "b_h", "W_xh_static");
  std::vector<std::string> os;
  for (int t = 1; t <= T_; ++t) {
    const std::string tm1 = std::to_string(t - 1);
    const std::string ts = std::to_string(t);
    AddContGate(net, t);
    // W_hh_h_{t-1} = W_hh * h_conted_{t-1} (W_hh shared by every time step).
    caffe::LayerParameter* transform =
        AddInnerProduct(net, "W_hh_h_" + tm1, "h_conted_" + tm1, "W_hh_h_" + tm1, d, 2, {"W_hh"});
    if (t == 1 && expose_hidden_) transform->add_propagate_down(true);  // toward h_0
    // h_t = tanh(W_hh_h_{t-1} + W_xh_x_t (+ W_xh_x_static)).
    caffe::LayerParameter* sum =
        AddLayer(net, "h_input_sum_" + ts, "Eltwise", {"W_hh_h_" + tm1, "W_xh_x_" + ts},
                 {"h_neuron_input_" + ts});
    if (static_input_) sum->add_bottom("W_xh_x_static");
    sum->mutable_eltwise_param()->set_operation(caffe::EltwiseParameter::SUM);
    AddLayer(net, "h_neuron_" + ts, "TanH", {"h_neuron_input_" + ts}, {"h_" + ts});
    // o_t = tanh(W_ho * h_t + b_o).
    AddInnerProduct(net, "W_ho_h_" + ts, "h_" + ts, "W_ho_h_" + ts, d, 2, {"W_ho", "b_o"});
    AddLayer(net, "o_neuron_" + ts, "TanH", {"W_ho_h_" + ts}, {"o_" + ts});
    os.push_back("o_" + ts);
  }
  // The final state as a blob of its own that nothing inside consumes (Caffe uses h_T
  // directly): its diff then carries exactly the gradient from outside.
  AddLayer(net, "h_T_copy", "Split", {"h_" + std::to_string(T_)}, {"h_T"});
  caffe::LayerParameter* concat = AddLayer(net, "o_concat", "Concat", os, {"o"});
  concat->mutable_concat_param()->set_axis(0);
}

CORTADO_REGISTER_LAYER(RNN, RNNLayer);

}  // namespace cortado
