// SPDX-License-Identifier: Apache-2.0
// Dropout (Caffe type "Dropout"): at train time zeroes each element with probability
// dropout_ratio and scales the kept ones by 1 / (1 - dropout_ratio); at test time the identity.
//
// Params (dropout_param): dropout_ratio (default 0.5, in [0, 1)), scale_train (default true;
// an NVIDIA Caffe extension: false keeps train-time values unscaled and scales by
// (1 - dropout_ratio) at test time instead). The phase comes from the layer param.
// Bottom: one tensor of any shape. Top: one tensor of the same shape; may be the bottom itself.
// The mask is drawn from the context's RNG in every train-time Forward and reused by Backward,
// so Backward is exact in place. Masks do not match Caffe's bit for bit (different RNG); the GPU
// pass draws its mask from the device generator, so it does not match the CPU pass's either.
// Mixed precision on the GPU (Layer::HalfTensors): values and gradients in the 16-bit type, each
// scaled in float32 and rounded once; the mask's draws stay float32.
#pragma once

#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class DropoutLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Dropout"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool TakesHalfTensors() const override { return true; }
  NhwcUse NhwcTensors() const override { return NhwcUse::kSame; }  // element by element

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  float ratio_ = 0.5f;
  float train_scale_ = 2.0f;        // multiplies kept values at train time
  float test_scale_ = 1.0f;         // multiplies every value at test time
  std::vector<unsigned int> mask_;  // 1 = kept, from the last train-time Forward
  // The GPU pass's mask: uniform draws in [0, 1) from the context's device generator, element
  // i kept when rand_[i] >= dropout_ratio (so with probability 1 - dropout_ratio).
  Tensor rand_;
};

}  // namespace cortado
