// SPDX-License-Identifier: Apache-2.0
// LSTM (Caffe type "LSTM"): a long short-term memory layer over T time steps (Hochreiter and
// Schmidhuber, 1997, in the form of Zaremba et al., 2014, without peepholes), unrolled into an
// internal net as Caffe does (recurrent_layer.hpp has the bottoms, tops, params and state).
//
// For each time step t = 1 .. T, with D = recurrent_param.num_output:
//   gates_t = W_xc x_t + b_c + W_xc_static x_static + W_hc (cont_t * h_{t-1})   (4D values)
//   [i, f, o, g] = [sigmoid, sigmoid, sigmoid, tanh](gates_t, split in blocks of D)
//   c_t = cont_t * f * c_{t-1} + i * g,   h_t = o * tanh(c_t)   (the LSTMUnit layer)
// Top: h = [h_1 .. h_T] (T x N x D). With expose_hidden: bottoms h_0, c_0 and tops h_T, c_T.
// Blobs (Caffe's order and shapes, so .caffemodel files load): W_xc (4D x input_dim, where
// input_dim = x.count(2)), b_c (4D), [W_xc_static (4D x x_static.count(1)) with a static
// input], W_hc (4D x D); fillers from recurrent_param (weight_filler, bias_filler).
#pragma once

#include <string>
#include <vector>

#include "layers/recurrent_layer.hpp"

namespace cortado {

class LSTMLayer final : public RecurrentLayer {
 public:
  using RecurrentLayer::RecurrentLayer;
  const char* type() const override { return "LSTM"; }

 protected:
  std::vector<std::string> RecurrentInputBlobNames() const override { return {"h_0", "c_0"}; }
  std::vector<std::string> RecurrentOutputBlobNames() const override { return {"h_T", "c_T"}; }
  std::string OutputBlobName() const override { return "h"; }
  void FillUnrolledNet(caffe::NetParameter* net_param) const override;
};

}  // namespace cortado
