// SPDX-License-Identifier: Apache-2.0
// MemoryData (Caffe type "MemoryData"): serves batches from arrays the caller provides with
// Reset(data, labels, n), walking through them batch by batch and wrapping around.
// Params: memory_data_param.batch_size, channels, height, width (all positive).
// Bottoms: none. Tops: data [batch_size, channels, height, width] and label [batch_size].
// Values are copied into the tops as given (transform_param is not applied, as in Caffe's
// Reset path). Forward before Reset is an error.
// With LayerParameter.source_class set (CaffeOnSpark: a JVM class supplies the data), the type
// builds a FeedDataLayer instead (feed_data_layer.hpp), which the JVM fills through JNI.
// CaffeOnSpark's memory_data_param.source and share_in_parallel are ignored here: the JVM reads
// the source (an LMDB path with source_class "com.yahoo.ml.caffe.LMDB": see docs/data.md).
//
// Differences from Caffe: no AddDatumVector / AddMatVector / set_batch_size; the tops receive a
// copy of the batch instead of pointing into the caller's arrays.
#pragma once

#include "layers/layer.hpp"

namespace cortado {

class MemoryDataLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "MemoryData"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int ExactNumTopBlobs() const override { return 2; }

  void Setup(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;

  // Serves `n` samples: data holds n x channels x height x width floats and labels n floats.
  // Neither is copied or owned: both must stay alive and unchanged until the next Reset or the
  // layer's destruction. n must be a positive multiple of batch_size. The next Forward returns
  // samples [0, batch_size).
  void Reset(float* data, float* labels, int n);

  int batch_size() const { return batch_size_; }
  int channels() const { return channels_; }
  int height() const { return height_; }
  int width() const { return width_; }

 protected:
  void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) override;
  void BackwardCpu(const std::vector<Tensor*>&, const std::vector<bool>&,
                   const std::vector<Tensor*>&) override {}
  // GPU: copies the batch from the caller's arrays into the tops' device memory
  // (memory_data_layer.cu). Backward: nothing.
  CORTADO_GPU_PASSES;

 private:
  // Checks that Reset gave data, shapes the tops, and returns the first sample of the batch.
  int BeginBatch(const std::vector<Tensor*>& top);

  int batch_size_ = 0, channels_ = 0, height_ = 0, width_ = 0;
  const float* data_ = nullptr;
  const float* labels_ = nullptr;
  int n_ = 0;
  int pos_ = 0;
};

}  // namespace cortado
