// SPDX-License-Identifier: Apache-2.0
// DummyData on the GPU. Constant tops are filled once by Setup (as on the CPU) and move to the
// device on first use. Tops refilled at every Forward are drawn on the device for "uniform" and
// (non-sparse) "gaussian" fillers, from the context's counter-based generator (so a seeded run
// repeats, though with other numbers than the CPU's generator). The other fillers (xavier,
// msra, positive_unitball, bilinear, sparse gaussian) are weight initialisers that DummyData
// rarely uses; they run on the host through the shared Fill, deliberately, so their rules live
// in one place, and the top moves to the device when the next layer reads it.
#include "layers/dummy_data_layer.hpp"
#include "layers/filler.hpp"
#include "math/gpu.hpp"

namespace cortado {

void DummyDataLayer::ForwardGpu(const std::vector<Tensor*>& /*bottom*/,
                                const std::vector<Tensor*>& top) {
  for (size_t i = 0; i < top.size(); ++i) {
    const caffe::FillerParameter& filler = fillers_[fillers_.size() == 1 ? 0 : i];
    if (!refill_[fillers_.size() == 1 ? 0 : i]) continue;
    const int n = top[i]->count();
    if (n == 0) continue;
    if (filler.type() == "uniform") {
      math::gpu::RngUniform(*ctx_, n, filler.min(), filler.max(), top[i]->mutable_gpu_data());
    } else if (filler.type() == "gaussian" && filler.sparse() < 0) {
      math::gpu::RngGaussian(*ctx_, n, filler.mean(), filler.std(), top[i]->mutable_gpu_data());
    } else {
      Fill(filler, ctx_->rng(), top[i]);
    }
  }
}

void DummyDataLayer::BackwardGpu(const std::vector<Tensor*>& /*top*/,
                                 const std::vector<bool>& /*propagate_down*/,
                                 const std::vector<Tensor*>& /*bottom*/) {}

}  // namespace cortado
