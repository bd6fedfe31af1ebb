// SPDX-License-Identifier: Apache-2.0
#include "layers/lstm_unit_layer.hpp"

#include <cmath>

namespace cortado {
namespace {

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void LSTMUnitLayer::Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) {
  const Tensor& c_prev = *bottom[0];
  const Tensor& x = *bottom[1];
  const Tensor& cont = *bottom[2];
  auto fail = [&](const char* what) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: {}; bottoms are c_prev [{}], gate input X [{}], cont [{}] (expected "
                  "1 x N x D, 1 x N x 4D, 1 x N)",
                  Describe(), what, c_prev.ShapeString(), x.ShapeString(), cont.ShapeString());
  };
  if (c_prev.num_axes() != 3 || x.num_axes() != 3 || cont.num_axes() != 2) {
    fail("c_prev and X need 3 axes and cont 2");
  }
  if (c_prev.shape(0) != 1 || x.shape(0) != 1 || cont.shape(0) != 1) {
    fail("every bottom must hold a single time step (first axis 1)");
  }
  num_ = c_prev.shape(1);
  if (x.shape(1) != num_ || cont.shape(1) != num_) {
    fail("the bottoms disagree on the number of streams N (axis 1)");
  }
  hidden_dim_ = c_prev.shape(2);
  if (x.shape(2) != 4 * hidden_dim_) fail("X's last axis must be 4 times c_prev's");
  top[0]->ReshapeLike(c_prev);
  top[1]->ReshapeLike(c_prev);
}

void LSTMUnitLayer::CheckNoContGradient(const std::vector<bool>& propagate_down) const {
  if (propagate_down[2]) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: cannot backpropagate to the sequence continuation indicators (bottom 2); "
                  "set propagate_down: false for it",
                  Describe());
  }
}

void LSTMUnitLayer::ForwardCpu(const std::vector<Tensor*>& bottom,
                               const std::vector<Tensor*>& top) {
  const int dim = hidden_dim_;
  const float* c_prev = bottom[0]->cpu_data();
  const float* x = bottom[1]->cpu_data();
  const float* cont = bottom[2]->cpu_data();
  float* c = top[0]->mutable_cpu_data();
  float* h = top[1]->mutable_cpu_data();
  for (int n = 0; n < num_; ++n) {
    const float* xn = x + 4 * dim * n;
    for (int d = 0; d < dim; ++d) {
      const int k = n * dim + d;
      const float i = Sigmoid(xn[d]);
      // cont == 0 gives f = 0 even for a non-finite gate input, as Caffe's CPU code.
      const float f = cont[n] == 0.0f ? 0.0f : cont[n] * Sigmoid(xn[dim + d]);
      const float o = Sigmoid(xn[2 * dim + d]);
      const float g = std::tanh(xn[3 * dim + d]);
      c[k] = f * c_prev[k] + i * g;
      h[k] = o * std::tanh(c[k]);
    }
  }
}

void LSTMUnitLayer::BackwardCpu(const std::vector<Tensor*>& top,
                                const std::vector<bool>& propagate_down,
                                const std::vector<Tensor*>& bottom) {
  CheckNoContGradient(propagate_down);
  if (!propagate_down[0] && !propagate_down[1]) return;
  const int dim = hidden_dim_;
  const float* c_prev = bottom[0]->cpu_data();
  const float* x = bottom[1]->cpu_data();
  const float* cont = bottom[2]->cpu_data();
  const float* c = top[0]->cpu_data();
  const float* dc_top = top[0]->cpu_diff();
  const float* dh_top = top[1]->cpu_diff();
  float* dc_prev = propagate_down[0] ? bottom[0]->mutable_cpu_diff() : nullptr;
  float* dx = propagate_down[1] ? bottom[1]->mutable_cpu_diff() : nullptr;
  for (int n = 0; n < num_; ++n) {
    const float* xn = x + 4 * dim * n;
    for (int d = 0; d < dim; ++d) {
      const int k = n * dim + d;
      const float i = Sigmoid(xn[d]);
      const float f = Sigmoid(xn[dim + d]);
      const float o = Sigmoid(xn[2 * dim + d]);
      const float g = std::tanh(xn[3 * dim + d]);
      const float tanh_c = std::tanh(c[k]);
      const float dc = dc_top[k] + dh_top[k] * o * (1.0f - tanh_c * tanh_c);
      // cont == 0 cuts c_prev off entirely, as in Forward.
      const float cont_dc = cont[n] == 0.0f ? 0.0f : cont[n] * dc;
      if (dc_prev != nullptr) dc_prev[k] = cont_dc * f;
      if (dx != nullptr) {
        float* dxn = dx + 4 * dim * n;
        dxn[d] = dc * g * i * (1.0f - i);
        dxn[dim + d] = cont_dc * c_prev[k] * f * (1.0f - f);
        dxn[2 * dim + d] = dh_top[k] * tanh_c * o * (1.0f - o);
        dxn[3 * dim + d] = dc * i * (1.0f - g * g);
      }
    }
  }
}

CORTADO_REGISTER_LAYER(LSTMUnit, LSTMUnitLayer);

}  // namespace cortado
