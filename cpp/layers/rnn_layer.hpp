// SPDX-License-Identifier: Apache-2.0
// RNN (Caffe type "RNN"): a simple (Elman) recurrent layer over T time steps, unrolled into an
// internal net as Caffe does (recurrent_layer.hpp has the bottoms, tops, params and state).
//
// For each time step t = 1 .. T, with D = recurrent_param.num_output:
//   h_t = tanh(W_hh (cont_t * h_{t-1}) + W_xh x_t + b_h + W_xh_static x_static)
//   o_t = tanh(W_ho h_t + b_o)
// Top: o = [o_1 .. o_T] (T x N x D). With expose_hidden: bottom h_0 and top h_T.
// Blobs (Caffe's order and shapes, so .caffemodel files load): W_xh (D x input_dim, where
// input_dim = x.count(2)), b_h (D), [W_xh_static (D x x_static.count(1)) with a static input],
// W_hh (D x D), W_ho (D x D), b_o (D); fillers from recurrent_param (weight_filler,
// bias_filler).
#pragma once

#include <string>
#include <vector>

#include "layers/recurrent_layer.hpp"

namespace cortado {

class RNNLayer final : public RecurrentLayer {
 public:
  using RecurrentLayer::RecurrentLayer;
  const char* type() const override { return "RNN"; }

 protected:
  std::vector<std::string> RecurrentInputBlobNames() const override { return {"h_0"}; }
  std::vector<std::string> RecurrentOutputBlobNames() const override { return {"h_T"}; }
  std::string OutputBlobName() const override { return "o"; }
  void FillUnrolledNet(caffe::NetParameter* net_param) const override;
};

}  // namespace cortado
