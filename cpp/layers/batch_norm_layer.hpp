// SPDX-License-Identifier: Apache-2.0
// BatchNorm (Caffe type "BatchNorm"): normalises each channel (axis 1) of its bottom to zero
// mean and unit variance: top = (x - mean) / sqrt(var + eps). No learned affine part: put a
// Scale layer with bias_term after it, as in Caffe.
// Params: batch_norm_param.use_global_stats (unset: false in TRAIN, true in TEST): use the
// stored statistics instead of this batch's; moving_average_fraction (default 0.999); eps
// (default 1e-5).
// Param blobs, as Caffe: [0] running mean sum (C), [1] running variance sum (C), [2] the
// 1-element normaliser; the statistics are blobs[0] / blobs[2] and blobs[1] / blobs[2]. Each
// training forward does blobs[2] = f * blobs[2] + 1, blobs[0] = f * blobs[0] + batch mean,
// blobs[1] = f * blobs[1] + m / (m - 1) * batch variance, m = count / C. They are not learned:
// param_propagate_down is false and every ParamSpec gets lr_mult 0 (a nonzero one is an error).
// Bottom: one, N x C x ... (at least 2 axes). Top: one of the same shape; may be in-place.
//
// Fusion: a Net computes an in-place per-channel Scale that directly follows an in-place
// BatchNorm on the same blob (and an in-place ReLU with negative_slope >= 0 after it) in the
// BatchNorm's own passes, as top = relu(x_norm * scale + bias): one pass over the tensor
// instead of three forward, two instead of five backward, and no saved copy of the Scale's
// input. The Scale and ReLU layers stay in the net (their weights, names and blobs are as
// before) but do nothing themselves. The results equal the separate layers' up to float
// rounding of the per-channel sums.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class EltwiseLayer;
class ScaleLayer;

class BatchNormLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "BatchNorm"; }
  // The GPU passes read and write the bottom and top (and keep x_norm) in the 16-bit type,
  // fused Scale and ReLU included; statistics and parameters stay float32.
  bool TakesHalfTensors() const override { return true; }
  NhwcUse NhwcTensors() const override { return NhwcUse::kSame; }
  // Its CPU passes (and those of the Scale, ReLU and sum fused into it) take channel blocks.
  NhwcUse BlockedTensors() const override { return NhwcUse::kSame; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

  // Makes this layer's passes compute `scale` (whose ScalesChannels() holds, in place on this
  // layer's top) and, with `relu`, a ReLU of slope `relu_slope` (>= 0) after it.
  // `scale_backward`: whether the Scale layer needs backward (its param diffs are accumulated
  // then, each as its param_propagate_down says). The caller marks the two layers fused.
  void FuseScale(ScaleLayer* scale, bool scale_backward, bool relu, float relu_slope);
  // For a net that never runs this layer backward (test nets): Forward then writes the top
  // directly and keeps no normalised copy, and Backward is an error.
  void DropBackwardState() { keep_x_norm_ = false; }
  // For a layer whose top is not its bottom (a Net makes the top of an in-place chain a blob of
  // its own for this): the GPU passes keep no normalised copy, and Backward and RecomputeTops
  // normalise the bottom again, value for value as Forward did (rounded to the 16-bit type as
  // the copy was), so the bottom must live until Backward. Forward writes only the top: one
  // pass over the tensor fewer, and the memory of the copy is the bottom's. The CPU passes keep
  // their copy (normalising again would cost them a pass over the tensor).
  void KeepInput() { keep_input_ = true; }
  // Makes this layer, with a fused Scale and no ReLU, compute the Eltwise SUM `sum` (plain_sum,
  // two bottoms) that alone reads its output: the Net makes the sum's other bottom this layer's
  // bottom 1 and the sum's top its top, so Forward writes top = relu(bottom 1 + x_norm * s + b)
  // with the sum's ReLU (the chain's value rounded to the 16-bit type first, as it would be
  // stored), and the chain's own output is never written. Backward runs the sum's backward pass
  // for bottom 1 alone (`sum_bottom` and `sum_top`: the sum's vectors; `residual`: bottom 1's
  // index in sum_bottom), then its own from bottom 1's gradient, which is the chain output's too
  // (coefficients 1). The caller marks the sum (and what is fused into it) fused into this layer.
  void FoldSum(EltwiseLayer* sum, std::vector<Tensor*> sum_bottom, std::vector<Tensor*> sum_top,
               int residual);
  // After FoldSum, for a Net that gives a blob of the folded sum a new tensor (a BatchNorm chain
  // producing the sum's other bottom keeping its input, Net::KeepBatchNormInputs): the sum's
  // passes run on `to` wherever they ran on `from`.
  void ReplaceSumBlob(Tensor* from, Tensor* to);
  bool fused_scale() const { return scale_ != nullptr; }
  bool keeps_input() const { return keep_input_; }
  bool folds_sum() const { return sum_ != nullptr; }
  // Backward works from its own normalised copy alone (or, KeepInput, from the bottom): a fused
  // ReLU's mask is where x_norm * s (+ b) is positive, computed as Forward computed it. A folded
  // sum's ReLU masks by the sign of the top, as the sum's own Backward does.
  bool BackwardReadsBottomData(int index) const override { return index == 0 && keep_input_; }
  bool BackwardReadsTopData(int /*index*/) const override;
  // The top is x_norm, or relu(x_norm * s + b) fused, from the normalised copy Backward keeps
  // (KeepInput: from the bottom, which Backward reads); not a folded sum's.
  bool CanRecomputeTops() const override { return keep_x_norm_ && sum_ == nullptr; }
  void RecomputeTops(const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;
#if CORTADO_WITH_CUDA
  void RecomputeTopGpu(Tensor* top);
  // The forward passes from `bottom` into `top`: with batch_statistics, this batch's statistics
  // first (and the running sums), else those in gpu_stats_.
  void ForwardPassGpu(const Tensor& bottom, bool batch_statistics, Tensor* top);
#endif

 private:
  bool use_global_stats_ = false;
  float moving_average_fraction_ = 0.999f;
  float eps_ = 1e-5f;
  int channels_ = 0;
  int num_ = 0;              // bottom shape(0)
  int spatial_dim_ = 0;      // product of the dimensions after the channel axis
  std::vector<float> mean_;  // per channel, of the last forward
  std::vector<float> std_;   // per channel: sqrt(var + eps) of the last forward
  Tensor x_norm_;            // the normalised output, kept for Backward (top may be in-place);
                             // on the GPU in the type of HalfTensors(), and unused with
                             // keep_input_
  bool keep_x_norm_ = true;  // false: DropBackwardState
  bool keep_input_ = false;  // KeepInput
  const Tensor* input_ = nullptr;  // the bottom of the last Reshape (KeepInput's RecomputeTops)
  // FoldSum: the sum, its bottom and top vectors, and bottom 1's index among its bottoms.
  EltwiseLayer* sum_ = nullptr;
  std::vector<Tensor*> sum_bottom_, sum_top_;
  int residual_index_ = 0;
  // GPU passes: per channel on the device, rows [0] mean and [1] std of the last forward,
  // [2] mean(dy) and [3] mean(dy * y) of the last backward.
  Tensor gpu_stats_;

  // Fusion (FuseScale): the Scale layer computed here, or null.
  ScaleLayer* scale_ = nullptr;
  bool scale_backward_ = false;
  bool relu_ = false;
  float relu_slope_ = 0.0f;
  // The fused Scale's blobs: scale (and bias, or null), and their diffs when Backward should
  // accumulate them (else null).
  struct Affine {
    const Tensor* scale = nullptr;
    const Tensor* bias = nullptr;
    Tensor* scale_grad = nullptr;
    Tensor* bias_grad = nullptr;
  };
  Affine FusedAffine() const;
  // FoldSum: the sum's backward pass into bottom 1's gradient (when propagate_down[1], which
  // `chain`, the chain's own backward pass, needs).
  void SumBackward(const std::vector<bool>& propagate_down, bool chain);
};

}  // namespace cortado
