// SPDX-License-Identifier: Apache-2.0
// BatchReindex (Caffe type "BatchReindex"): picks rows of a batch by index, top[m] =
// data[index[m]]; indices may repeat, leave rows out, and come in any order.
//
// Bottoms: 0 = data, N x ... (at least one axis); 1 = indices, a 1-D tensor of M values, each
//          in [0, N) (compared as given, then truncated to an int, as Caffe).
// Top: M x ... (data's shape with the first axis M). No params.
// Backward: ddata[n] = sum of dtop[m] over every m with index[m] = n (0 for rows never picked);
// the indices get no gradient (asking for it is an error). Both passes read the indices on the
// host (the GPU passes too, as Caffe's do: to check them, and to group the rows for Backward).
// Differences from Caffe: an index outside [0, N) throws kInvalidArgument naming the layer, the
// index value and its position (Caffe aborts); force_backward never reaches the indices (Caffe
// would abort). The GPU Backward sums each row's picks in the same order as the CPU's.
#pragma once

#include <memory>

#include "layers/layer.hpp"

namespace cortado {

class BatchReindexLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "BatchReindex"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  bool AllowForceBackward(int bottom_index) const override { return bottom_index == 0; }
  bool BackwardReadsBottomData(int bottom_index) const override { return bottom_index == 1; }
  bool BackwardReadsTopData(int /*top_index*/) const override { return false; }
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                   const std::vector<Tensor*>& bottom) override;
  CORTADO_GPU_PASSES;

 private:
  // Throws unless every index lies in [0, N).
  void CheckIndices(const std::vector<Tensor*>& bottom) const;
  void CheckIndexBackward(const std::vector<bool>& propagate_down) const;

  // GPU Backward: for data row n, the top rows that picked it are rows_[offsets_[n] ..
  // offsets_[n + 1]) (ascending), kept as ints [offsets (N + 1) | rows (M)].
  std::shared_ptr<SyncedMemory> groups_;
};

}  // namespace cortado
