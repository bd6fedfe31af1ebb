// SPDX-License-Identifier: Apache-2.0
// LSTMUnit on the GPU: the same rules as lstm_unit_layer.cpp, one (stream, hidden unit) pair per
// thread; each thread reads its four gate inputs and writes its own outputs.
#include "core/cuda.hpp"
#include "layers/lstm_unit_layer.hpp"

namespace cortado {
namespace {

__device__ float SigmoidDev(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void LSTMUnitForward(int count, int dim, const float* c_prev, const float* x,
                                const float* cont, float* c, float* h) {
  CORTADO_KERNEL_LOOP(k, count) {
    const int n = static_cast<int>(k / dim);
    const int d = static_cast<int>(k % dim);
    const float* xn = x + 4 * static_cast<int64_t>(dim) * n;
    const float i = SigmoidDev(xn[d]);
    const float f = cont[n] == 0.0f ? 0.0f : cont[n] * SigmoidDev(xn[dim + d]);
    const float o = SigmoidDev(xn[2 * dim + d]);
    const float g = tanhf(xn[3 * dim + d]);
    const float ck = f * c_prev[k] + i * g;
    c[k] = ck;
    h[k] = o * tanhf(ck);
  }
}

// dc_prev or dx may be null (that bottom is not propagated to).
__global__ void LSTMUnitBackward(int count, int dim, const float* c_prev, const float* x,
                                 const float* cont, const float* c, const float* dc_top,
                                 const float* dh_top, float* dc_prev, float* dx) {
  CORTADO_KERNEL_LOOP(k, count) {
    const int n = static_cast<int>(k / dim);
    const int d = static_cast<int>(k % dim);
    const float* xn = x + 4 * static_cast<int64_t>(dim) * n;
    const float i = SigmoidDev(xn[d]);
    const float f = SigmoidDev(xn[dim + d]);
    const float o = SigmoidDev(xn[2 * dim + d]);
    const float g = tanhf(xn[3 * dim + d]);
    const float tanh_c = tanhf(c[k]);
    const float dc = dc_top[k] + dh_top[k] * o * (1.0f - tanh_c * tanh_c);
    const float cont_dc = cont[n] == 0.0f ? 0.0f : cont[n] * dc;
    if (dc_prev != nullptr) dc_prev[k] = cont_dc * f;
    if (dx != nullptr) {
      float* dxn = dx + 4 * static_cast<int64_t>(dim) * n;
      dxn[d] = dc * g * i * (1.0f - i);
      dxn[dim + d] = cont_dc * c_prev[k] * f * (1.0f - f);
      dxn[2 * dim + d] = dh_top[k] * tanh_c * o * (1.0f - o);
      dxn[3 * dim + d] = dc * i * (1.0f - g * g);
    }
  }
}

}  // namespace

void LSTMUnitLayer::ForwardGpu(const std::vector<Tensor*>& bottom,
                               const std::vector<Tensor*>& top) {
  const int count = top[0]->count();
  if (count == 0) return;
  LSTMUnitForward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      count, hidden_dim_, bottom[0]->gpu_data(), bottom[1]->gpu_data(), bottom[2]->gpu_data(),
      top[0]->mutable_gpu_data(), top[1]->mutable_gpu_data());
  CORTADO_CUDA_CHECK_LAUNCH();
}

void LSTMUnitLayer::BackwardGpu(const std::vector<Tensor*>& top,
                                const std::vector<bool>& propagate_down,
                                const std::vector<Tensor*>& bottom) {
  CheckNoContGradient(propagate_down);
  if (!propagate_down[0] && !propagate_down[1]) return;
  const int count = top[0]->count();
  if (count == 0) return;
  LSTMUnitBackward<<<cuda::Blocks(count), cuda::kThreads, 0, cuda::Stream(*ctx_)>>>(
      count, hidden_dim_, bottom[0]->gpu_data(), bottom[1]->gpu_data(), bottom[2]->gpu_data(),
      top[0]->gpu_data(), top[0]->gpu_diff(), top[1]->gpu_diff(),
      propagate_down[0] ? bottom[0]->mutable_gpu_diff() : nullptr,
      propagate_down[1] ? bottom[1]->mutable_gpu_diff() : nullptr);
  CORTADO_CUDA_CHECK_LAUNCH();
}

}  // namespace cortado
