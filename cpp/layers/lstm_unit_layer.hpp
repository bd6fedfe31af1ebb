// SPDX-License-Identifier: Apache-2.0
// LSTMUnit (Caffe type "LSTMUnit"): one time step of an LSTM cell, the unit the LSTM layer
// unrolls (lstm_layer.hpp). No parameters.
//
// Bottoms: c_{t-1} (1 x N x D), the gate inputs X (1 x N x 4D) in Caffe's order [i, f, o, g]
// (each a block of D values per stream), and the continuation indicators cont (1 x N).
// Tops: c_t and h_t, both 1 x N x D.
//   i = sigmoid(X_i), f = sigmoid(X_f), o = sigmoid(X_o), g = tanh(X_g)
//   c_t = cont * f * c_{t-1} + i * g
//   h_t = o * tanh(c_t)
// Backward: with dc = dc_t + dh_t * o * (1 - tanh(c_t)^2),
//   dc_{t-1} = cont * f * dc, dX_i = dc * g * i (1 - i), dX_f = cont * dc * c_{t-1} * f (1 - f),
//   dX_o = dh_t * tanh(c_t) * o (1 - o), dX_g = dc * i * (1 - g^2).
// No gradient reaches cont: asking for one (propagate_down[2]) is an error, as in Caffe.
// Difference from Caffe: Caffe's CPU backward writes dX_f as dc * c_{t-1} * f' (1 - f') with
// f' = cont * f, which is the true gradient only for cont in {0, 1}; its GPU kernel (and this
// layer, on both devices) uses the true gradient above. For binary cont all three agree.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class LSTMUnitLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "LSTMUnit"; }
  int ExactNumBottomBlobs() const override { return 3; }
  int ExactNumTopBlobs() const override { return 2; }
  bool AllowForceBackward(int bottom_index) const override { return bottom_index != 2; }
  // Backward reads c_t but not h_t.
  bool BackwardReadsTopData(int top_index) const override { return top_index == 0; }

  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  // Throws unless propagate_down leaves cont alone.
  void CheckNoContGradient(const std::vector<bool>& propagate_down) const;

  int num_ = 0;         // N, the number of streams
  int hidden_dim_ = 0;  // D
};

}  // namespace cortado
