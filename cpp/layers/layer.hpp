// SPDX-License-Identifier: Apache-2.0
// Layer: the unit a Net is made of (Caffe's Layer). A layer reads its bottom tensors and writes
// its top tensors in Forward, and turns top diffs into bottom diffs (and parameter diffs) in
// Backward. Each concrete layer lives in <name>_layer.{hpp,cpp} and registers itself under its
// Caffe type string with CORTADO_REGISTER_LAYER.
//
// Life cycle, driven by the Net: construct -> Initialize(bottom, top) once -> then, per
// iteration, Reshape (when input shapes may change), Forward, Backward.
// A layer is used by one thread at a time; it keeps a non-owning pointer to its Context.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/context.hpp"
#include "core/error.hpp"
#include "core/registry.hpp"
#include "core/tensor.hpp"
#include "proto/caffe.pb.h"

namespace cortado {

class Layer {
 public:
  Layer(const caffe::LayerParameter& param, Context* ctx);
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  // Checks blob counts, runs Setup and Reshape, and sets up loss weights on the tops.
  void Initialize(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top);

  // Layer-specific one-time setup: read parameters, create and fill `blobs_`.
  virtual void Setup(const std::vector<Tensor*>& /*bottom*/, const std::vector<Tensor*>& /*top*/) {}
  // Shapes the tops (and internal buffers) from the bottoms' shapes.
  virtual void Reshape(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) = 0;

  // Runs forward on the context's device and returns the weighted loss of this layer's tops.
  float Forward(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top);
  // Computes bottom diffs for bottoms with propagate_down set, and parameter diffs
  // (accumulated: the net clears them before each backward pass).
  void Backward(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                const std::vector<Tensor*>& bottom);

  // The Caffe type string ("ReLU").
  virtual const char* type() const = 0;
  const std::string& name() const { return param_.name(); }
  const caffe::LayerParameter& layer_param() const { return param_; }
  caffe::Phase phase() const { return param_.phase(); }
  Context* context() const { return ctx_; }

  // Learnable parameters (weights, biases, statistics), shared_ptr so nets can share them.
  std::vector<std::shared_ptr<Tensor>>& blobs() { return blobs_; }
  // Writes param_ with the current blobs into `proto`.
  virtual void ToProto(caffe::LayerParameter* proto, bool write_diff = false) const;

  float loss(int top_index) const {
    return top_index < static_cast<int>(loss_.size()) ? loss_[top_index] : 0.0f;
  }
  void set_loss(int top_index, float value);

  // Blob count contract, as in Caffe; -1 means no constraint.
  virtual int ExactNumBottomBlobs() const { return -1; }
  virtual int MinBottomBlobs() const { return -1; }
  virtual int MaxBottomBlobs() const { return -1; }
  virtual int ExactNumTopBlobs() const { return -1; }
  virtual int MinTopBlobs() const { return -1; }
  virtual int MaxTopBlobs() const { return -1; }
  virtual bool EqualNumBottomTopBlobs() const { return false; }
  // Layers whose missing tops the net should create anonymously (losses: the loss output).
  virtual bool AutoTopBlobs() const { return false; }
  // Whether force_backward may set propagate_down for this bottom (false for labels).
  virtual bool AllowForceBackward(int /*bottom_index*/) const { return true; }
  // Whether Backward reads this bottom's (top's) data. The net's memory plan lets blobs whose
  // data no Backward reads share buffers once Forward is past them; true is always safe.
  virtual bool BackwardReadsBottomData(int /*bottom_index*/) const { return true; }
  virtual bool BackwardReadsTopData(int /*top_index*/) const { return true; }
  // Whether RecomputeTops can write this layer's tops again after Forward, bit for bit as
  // Forward wrote them, from what the layer keeps for its own Backward (not from its bottoms).
  // The training memory plan then lets such a top that some Backward reads share its buffer once
  // Forward is past it, and recomputes it just before the first Backward that reads it.
  virtual bool CanRecomputeTops() const { return false; }
  virtual void RecomputeTops(const std::vector<Tensor*>& top);

  // Data layers: position the sample stream so the next Forward yields batch `batch_index`
  // (counted from the start of training), so a resumed run sees the data an uninterrupted run
  // would. Other layers ignore it.
  virtual void Seek(int64_t /*batch_index*/) {}
  // Data layers: make this layer one of `num_shards` readers of the same source, for
  // data-parallel training. From now on its k-th batch (k counted as Seek counts, so Seek and
  // resuming stay as they are) is batch k * num_shards + shard of the unsharded stream, so the
  // shards together read, per step, the batches one reader with num_shards times the batch size
  // would. Other layers ignore it.
  virtual void SetShard(int /*shard*/, int /*num_shards*/) {}

  bool param_propagate_down(int index) const {
    return index < static_cast<int>(param_propagate_down_.size()) && param_propagate_down_[index];
  }
  void set_param_propagate_down(int index, bool value);

  // Mixed precision: whether this layer's GPU passes can read and write its bottoms and tops in
  // the context's 16-bit type (Context::half_compute). Net keeps a blob in that type
  // (Tensor::set_home_type) when every layer that reads or writes it can. Default false.
  virtual bool TakesHalfTensors() const { return false; }
  // The type this layer's GPU passes use for its bottoms' and tops' values: the context's 16-bit
  // type where TakesHalfTensors(), the context is on a CUDA device and CORTADO_HALF_TENSORS is not
  // 0; kNone (float32) otherwise. They take each tensor's view in it (Tensor::gpu_half_data),
  // whatever that tensor's home type.
  HalfType HalfTensors() const;
  // Mixed precision with channels-last blobs: how this layer's 16-bit GPU passes take 4-D
  // tensors whose home is NHWC (Tensor::home_nhwc). kNo: NCHW only. kSame: either layout, all
  // its bottoms and tops in the same one (element-wise layers, BatchNorm). kEach: each bottom
  // and top in either, independently (cuDNN convolutions, pooling). Net keeps a group of 16-bit
  // blobs in NHWC when every layer that touches it takes that and a convolution is among them
  // (half_tensors.cpp). Default kNo.
  enum class NhwcUse { kNo, kSame, kEach };
  virtual NhwcUse NhwcTensors() const { return NhwcUse::kNo; }
  // The same for the CPU's float32 passes and tensors kept in channel blocks (Tensor::cpu_block):
  // kSame or kEach where the layer's CPU passes read and write the blocked homes themselves
  // (cpu_home_data); others read and write the NCHW views, which are reordered copies. Net keeps
  // a group of blobs in blocks when every layer that touches it takes them and a convolution is
  // among them (blocked_tensors.cpp). Default kNo.
  virtual NhwcUse BlockedTensors() const { return NhwcUse::kNo; }
  // The same for blobs whose channels end in a padded block (Tensor::cpu_block_padded): layers
  // whose passes know the geometry (convolution, pooling) and so leave the extra lanes zero.
  // Default kNo.
  virtual NhwcUse PaddedBlockedTensors() const { return NhwcUse::kNo; }

  // Set by the Net when another layer's passes compute this layer too (it fuses BatchNorm with
  // the Scale and ReLU that follow it in place): Forward and Backward then do nothing.
  const Layer* fused_into() const { return fused_into_; }
  void set_fused_into(const Layer* host) { fused_into_ = host; }

 protected:
  virtual void ForwardCpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) = 0;
  virtual void BackwardCpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom) = 0;
  // GPU versions default to the CPU code through host copies (and say so once).
  virtual void ForwardGpu(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top);
  virtual void BackwardGpu(const std::vector<Tensor*>& top, const std::vector<bool>& propagate_down,
                           const std::vector<Tensor*>& bottom);

  // "layer 'conv1' (Convolution)", for messages.
  std::string Describe() const;

  caffe::LayerParameter param_;
  Context* ctx_;
  std::vector<std::shared_ptr<Tensor>> blobs_;
  std::vector<bool> param_propagate_down_;
  std::vector<float> loss_;

 private:
  void CheckBlobCounts(const std::vector<Tensor*>& bottom, const std::vector<Tensor*>& top) const;
  void SetLossWeights(const std::vector<Tensor*>& top);

  const Layer* fused_into_ = nullptr;
};

using LayerRegistry = Registry<Layer, const caffe::LayerParameter&, Context*>;

// Creates the layer named by param.type(); an unknown type lists the known ones.
std::unique_ptr<Layer> CreateLayer(const caffe::LayerParameter& param, Context* ctx);

}  // namespace cortado

// In a layer's class body (protected:), declares the GPU passes its .cu file defines; expands to
// nothing in a build without CUDA, where the base class's host fallback is never reached.
#if CORTADO_WITH_CUDA
#define CORTADO_GPU_PASSES                                              \
  void ForwardGpu(const std::vector<::cortado::Tensor*>& bottom,        \
                  const std::vector<::cortado::Tensor*>& top) override; \
  void BackwardGpu(const std::vector<::cortado::Tensor*>& top,          \
                   const std::vector<bool>& propagate_down,             \
                   const std::vector<::cortado::Tensor*>& bottom) override
#else
#define CORTADO_GPU_PASSES static_assert(true)
#endif

// Ends a layer's .cpp: CORTADO_REGISTER_LAYER(ReLU, ReLULayer);
#define CORTADO_REGISTER_LAYER(type, Class)                                      \
  static ::cortado::Registerer<::cortado::Layer, const ::caffe::LayerParameter&, \
                               ::cortado::Context*>                              \
      cortado_layer_registerer_##type(                                           \
          #type,                                                                 \
          [](const ::caffe::LayerParameter& param,                               \
             ::cortado::Context* ctx) -> std::unique_ptr<::cortado::Layer> {     \
            return std::make_unique<Class>(param, ctx);                          \
          })
