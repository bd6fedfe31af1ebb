// SPDX-License-Identifier: Apache-2.0
// The unrolled LSTM follows Caffe's lstm_layer.cpp layer for layer (so the parameters, their
// order and their fillers are Caffe's); only the final-state copies differ (see FillUnrolledNet).
#include "layers/lstm_layer.hpp"

#include <fmt/format.h>

namespace cortado {

void LSTMLayer::FillUnrolledNet(caffe::NetParameter* net) const {
  const int gate_dim = 4 * num_output();
  AddCommonLayers(net, gate_dim, "W_xc", "b_c", "W_xc_static");
  std::vector<std::string> hs;
  for (int t = 1; t <= T_; ++t) {
    const std::string tm1 = std::to_string(t - 1);
    const std::string ts = std::to_string(t);
    AddContGate(net, t);
    // W_hc_h_{t-1} = W_hc * h_conted_{t-1} (W_hc shared by every time step).
    caffe::LayerParameter* transform = AddInnerProduct(net, "transform_" + ts, "h_conted_" + tm1,
                                                       "W_hc_h_" + tm1, gate_dim, 2, {"W_hc"});
    if (t == 1 && expose_hidden_) transform->add_propagate_down(true);  // toward h_0
    // gate_input_t = W_hc_h_{t-1} + W_xc_x_t (+ W_xc_x_static).
    caffe::LayerParameter* sum = AddLayer(net, "gate_input_" + ts, "Eltwise",
                                          {"W_hc_h_" + tm1, "W_xc_x_" + ts}, {"gate_input_" + ts});
    if (static_input_) sum->add_bottom("W_xc_x_static");
    sum->mutable_eltwise_param()->set_operation(caffe::EltwiseParameter::SUM);
    // c_t, h_t from c_{t-1}, the gate inputs and cont_t.
    caffe::LayerParameter* unit =
        AddLayer(net, "unit_" + ts, "LSTMUnit", {"c_" + tm1, "gate_input_" + ts, "cont_" + ts},
                 {"c_" + ts, "h_" + ts});
    if (t == 1 && expose_hidden_) {
      // c_0 is a bottom of the layer: it gets its gradient (never cont).
      unit->add_propagate_down(true);
      unit->add_propagate_down(true);
      unit->add_propagate_down(false);
    }
    hs.push_back("h_" + ts);
  }
  // The final states as blobs of their own that nothing inside consumes (Caffe copies c_T the
  // same way, and uses h_T directly): their diffs then carry exactly the gradient from outside.
  const std::string last = std::to_string(T_);
  AddLayer(net, "h_T_copy", "Split", {"h_" + last}, {"h_T"});
  AddLayer(net, "c_T_copy", "Split", {"c_" + last}, {"c_T"});
  caffe::LayerParameter* concat = AddLayer(net, "h_concat", "Concat", hs, {"h"});
  concat->mutable_concat_param()->set_axis(0);
}

CORTADO_REGISTER_LAYER(LSTM, LSTMLayer);

}  // namespace cortado
