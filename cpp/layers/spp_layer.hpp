// SPDX-License-Identifier: Apache-2.0
// SPP (Caffe type "SPP"): spatial pyramid pooling (He et al., 2014). Level l (l = 0 ..
// pyramid_height - 1) pools each channel over a grid of bins = 2^l by 2^l windows covering the
// whole image; the levels' outputs are flattened and concatenated, so a fixed-length vector
// comes out of an image of any size.
//
// Params (spp_param): pyramid_height (required, > 0), pool (MAX default, AVE, or STOCHASTIC as
// Cortado's Pooling runs it: on a GPU context only, and only where no level needs padding; on
// the CPU or with padding the internal Pooling's error is thrown). engine is ignored.
// Level l is Caffe's Pooling with, per axis (H shown; W alike):
//   kernel_h = stride_h = ceil(H / bins),  pad_h = (kernel_h * bins - H + 1) / 2
// and Pooling's output size rules, so it yields bins x bins outputs for ordinary sizes.
// Bottom: one, [N, C, H, W]. Top: [N, C * sum_l 4^l] (each level's [N, C, bins, bins] flattened
// to [N, C * bins^2], levels in order), except with pyramid_height 1, where the one level
// writes the top directly and the top is [N, C, 1, 1] (Caffe's special case).
// As in Caffe, the layer is a small net of internal layers made with CreateLayer on this
// layer's context: a Split of the bottom, one Pooling and one Flatten per level, and a Concat;
// so their GPU passes run on a GPU context and SPP needs no .cu of its own. Reshape rebuilds the
// Pooling layers when the bottom's shape changes. Backward: through those layers (Split sums
// the levels' gradients into the bottom diff).
// Errors: kInvalidArgument for pyramid_height 0 or a bottom that is not 4-D; a level the
// internal Pooling refuses (e.g. a pad not smaller than the kernel, which happens when a side
// is small for the number of bins, where Caffe's Pooling CHECK-fails) throws that Pooling's
// error with this layer and the level in front.
#pragma once

#include <memory>
#include <vector>

#include "layers/layer.hpp"

namespace cortado {

class SPPLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "SPP"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

  // Caffe's pooling parameters for pyramid level `level` of a bottom_h x bottom_w image.
  static caffe::PoolingParameter LevelPooling(int level, int bottom_h, int bottom_w,
                                              caffe::SPPParameter::PoolMethod pool);

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  // The internal layers pick their device from the context, so the GPU passes are the CPU ones.
  void ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override {
    ForwardCpu(bottom, top);
  }
  void BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override {
    BackwardCpu(top, propagate_down, bottom);
  }

 private:
  void CheckBottom(const Tensor& bottom) const;
  // (Re)creates and initializes the Pooling layer of `level` for the current bottom size.
  void BuildPooling(int level, const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top);

  int pyramid_height_ = 0;
  std::vector<int> bottom_shape_;  // the shape the internal layers are built for

  std::unique_ptr<Layer> split_;
  std::vector<std::unique_ptr<Layer>> pooling_;
  std::vector<std::unique_ptr<Layer>> flatten_;
  std::unique_ptr<Layer> concat_;
  std::vector<std::unique_ptr<Tensor>> split_tops_;  // one per level, sharing the bottom's data
  std::vector<std::unique_ptr<Tensor>> pooled_;      // [N, C, bins, bins] per level
  std::vector<std::unique_ptr<Tensor>> flattened_;   // [N, C * bins^2] per level
};

}  // namespace cortado
