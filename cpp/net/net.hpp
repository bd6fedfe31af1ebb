// SPDX-License-Identifier: Apache-2.0
// Net: a DAG of layers built from a NetParameter (Caffe's Net).
//
// Building follows Caffe: layers are filtered by the net state (phase, level, stages) against
// each layer's include/exclude rules, Split layers are inserted where one top feeds several
// bottoms, tops named like a bottom are computed in place, parameters named alike are shared,
// and backward runs only where it can reach a loss. Errors name the layer, its type and the
// shapes of its bottoms. A Net is used by one thread at a time.
//
// Then, unless NetOptions::fuse is false, each in-place BatchNorm followed in place by a
// per-channel Scale (and a ReLU) is fused: the BatchNorm layer computes all of them and the
// others do nothing (BatchNormLayer::FuseScale); so is each Eltwise SUM followed in place by a
// ReLU; and each two-top Split of such a sum's output is folded into the sum's Backward, which
// adds the Split's two top gradients itself (a residual block's input gradient, without
// writing out the sum: the Split's bottom then gets no diff of its own). A partial ForwardFromTo
// that ends between fused layers therefore runs the whole group, and a partial BackwardFromTo
// must not end between a sum and its folded Split.
//
// Finally the gradients (diffs) of the learnable parameters are laid out in one allocation (see
// flat_diff below), so that a collective can reduce them all at once.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/tensor.hpp"
#include "layers/layer.hpp"
#include "net/net_options.hpp"
#include "proto/caffe.pb.h"

namespace cortado {

// CORTADO_ALLOW_NONFINITE_LOSS set (and not "0"): training goes on through a NaN or infinite
// loss (Caffe's behaviour), and weights holding them load. Read anew at every call.
bool NonFiniteAllowed();

class Net {
 public:
  // Builds the net for param.state() (phase defaults to TEST, as in Caffe).
  Net(const caffe::NetParameter& param, Context* ctx, const NetOptions& options = {});
  // Reads a prototxt (upgrading old formats) and builds it for `phase`, `level` and `stages`.
  Net(const std::string& path, caffe::Phase phase, Context* ctx, int level = 0,
      const std::vector<std::string>& stages = {}, const NetOptions& options = {});
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  // Runs every layer forward; returns the total weighted loss.
  float Forward();
  float ForwardFromTo(int start, int end);
  // Runs backward over the layers that need it (param diffs accumulate: see ClearParamDiffs).
  void Backward();
  // Runs layers start, start - 1, ..., end (inclusive), those that need backward.
  void BackwardFromTo(int start, int end);
  // Adds a hook (Caffe's Net::add_after_backward) that Backward and BackwardFromTo call with a
  // layer's index once that layer's parameters have their gradients for this pass: right after
  // the layer's Backward, on the thread running Backward, in backward order (descending layer
  // index), for every layer that runs backward (layer_need_backward()), whether or not it has
  // parameters. On a GPU context the gradients are queued on the context's stream, not
  // finished: a hook that hands them to another stream must order it after this one. A layer
  // fused into another (see the top of this file) is computed by that layer's Backward, so its
  // call comes right after that one, just before the call for the layer it is fused into
  // (the order stays descending). Hooks run in the order they were added; a hook that throws
  // stops the pass and the error propagates out of Backward. Add hooks before training, not
  // from within a hook.
  void AddAfterBackward(std::function<void(int layer_id)> hook);
  // ClearParamDiffs, Forward, Backward; returns the loss.
  float ForwardBackward();
  // Re-runs every layer's Reshape (after the inputs changed shape).
  void Reshape();
  // The training memory plan, in two parts. Both return the bytes saved at the current shapes;
  // a later Reshape that grows a blob gives it buffers of its own again. Neither touches the
  // net's inputs, outputs, losses, data layers' tops or parameters.
  //
  // ShareDiffBuffers: blobs whose gradients are never alive at the same time during Backward
  // keep them in one buffer. A gradient lives from the backward pass of the layer that writes it
  // (its consumer) to that of the last layer that reads it (its producer); only blobs whose first
  // toucher in Backward overwrites the diff take part. After Backward, their diffs hold what a
  // later layer wrote, not their own gradient.
  size_t ShareDiffBuffers();
  // ShareDataBuffers: a blob whose data no Backward reads (Layer::BackwardReadsBottomData and
  // BackwardReadsTopData) is alive only from the Forward of its producer to that of its last
  // consumer; such blobs share buffers when those spans do not meet. After Forward, their data
  // holds what a later layer wrote. The blobs named in `keep` stay out of the plan too (those a
  // caller reads after Forward, such as features); an unknown name is kNotFound.
  size_t ShareDataBuffers(const std::vector<std::string>& keep = {});
  // ShareTrainingBuffers: both of the above in one plan over Forward and then Backward, in
  // which a gradient may also take the buffer of data that Backward has finished reading (a
  // blob's data lives from the Forward of its producer to the Backward of the last layer whose
  // Backward reads it). During Backward the gradients of the early, large blobs then reuse the
  // activations of the later layers. After Backward, the planned blobs' data and diffs hold what
  // later layers wrote; the next Forward writes the data again. What a training net uses.
  // With options().recompute, a blob whose last writer in Forward can recompute it
  // (Layer::CanRecomputeTops) and that only Backwards from that layer on read takes two buffers:
  // one from its Forward to the last Forward that reads it, and one from the first Backward that
  // reads it to the last; Backward switches the blob to the second and has the layer write it
  // again just before the first of those Backwards, and Forward switches it back.
  size_t ShareTrainingBuffers();
  // For nets that only ever run Forward (test nets): Backward then does nothing, and layers drop
  // what they keep only for it (BatchNorm's normalised copy).
  void SetForwardOnly();
  // Zeroes the diffs of the learnable parameters (the whole flat diff buffer, in one call).
  void ClearParamDiffs();
  // data -= diff for every learnable parameter.
  void Update();

  // Copies weights by layer name from a trained net (Caffe's CopyTrainedLayersFrom): layers the
  // source lacks keep their values, source layers this net lacks are ignored, and a blob of
  // another shape is an error naming the layer and both shapes.
  void CopyTrainedLayersFrom(const caffe::NetParameter& trained);
  // From a .caffemodel file (binary NetParameter, upgraded if old) or Caffe's HDF5 model file.
  void CopyTrainedLayersFrom(const std::string& path);
  // Makes this net use the other net's parameter tensors (a test net shares the train net's).
  void ShareTrainedLayersWith(const Net& other);
  // Writes the net definition with its weights (and diffs if asked).
  void ToProto(caffe::NetParameter* param, bool write_diff = false) const;
  // Makes every data layer shard `shard` of `num_shards` (Layer::SetShard): replica r of R in
  // data-parallel training reads its own batches.
  void SetDataShard(int shard, int num_shards);

  const std::string& name() const { return name_; }
  caffe::Phase phase() const { return phase_; }
  // What the net was built with (callers read share_buffers to decide whether to plan).
  const NetOptions& options() const { return options_; }
  Context* context() const { return ctx_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  const std::vector<std::string>& layer_names() const { return layer_names_; }
  const std::vector<std::shared_ptr<Tensor>>& blobs() const { return blobs_; }
  const std::vector<std::string>& blob_names() const { return blob_names_; }
  const std::vector<std::vector<Tensor*>>& bottom_vecs() const { return bottom_vecs_; }
  const std::vector<std::vector<Tensor*>>& top_vecs() const { return top_vecs_; }
  const std::vector<int>& top_ids(int layer) const { return top_ids_[layer]; }
  const std::vector<int>& bottom_ids(int layer) const { return bottom_ids_[layer]; }
  const std::vector<std::vector<bool>>& bottom_need_backward() const {
    return bottom_need_backward_;
  }
  const std::vector<bool>& layer_need_backward() const { return layer_need_backward_; }
  const std::vector<float>& blob_loss_weights() const { return blob_loss_weights_; }
  // Tops of Input layers, and blobs no layer consumes.
  const std::vector<Tensor*>& input_blobs() const { return input_blobs_; }
  const std::vector<Tensor*>& output_blobs() const { return output_blobs_; }
  // How many blobs the net keeps in a 16-bit type between layers (mixed precision on the GPU:
  // the blobs that only layers computing in it touch; Layer::TakesHalfTensors).
  int num_half_blobs() const { return num_half_blobs_; }
  // How many of them it keeps channels-last (NHWC; Layer::NhwcTensors, net/channels_last.hpp).
  int num_nhwc_blobs() const { return num_nhwc_blobs_; }
  // How many blobs it keeps in channel blocks on the CPU (Tensor::cpu_block, Layer::
  // BlockedTensors; blocked_tensors.cpp), and the block (0: none).
  int num_blocked_blobs() const { return num_blocked_blobs_; }
  const std::vector<int>& output_blob_indices() const { return output_blob_indices_; }

  bool has_blob(const std::string& name) const { return blob_index_.count(name) != 0; }
  // Throws kNotFound naming the blob.
  Tensor* blob_by_name(const std::string& name) const;
  bool has_layer(const std::string& name) const { return layer_index_.count(name) != 0; }
  Layer* layer_by_name(const std::string& name) const;

  // Every parameter tensor of every layer (shared ones appear once per layer).
  const std::vector<std::shared_ptr<Tensor>>& params() const { return params_; }
  // The parameters a solver updates: owners only, each once.
  const std::vector<Tensor*>& learnable_params() const { return learnable_params_; }
  const std::vector<float>& params_lr() const { return params_lr_; }
  const std::vector<float>& params_weight_decay() const { return params_weight_decay_; }
  // For each entry of params(): the index of its owner in params(), or -1 if it owns itself.
  const std::vector<int>& param_owners() const { return param_owners_; }
  // For each entry of learnable_params(): the lowest index of a layer that uses it (its owner or
  // a layer sharing it). Backward runs the layers in descending order, so within a pass the
  // parameter's gradient is complete once backward has passed that layer (AddAfterBackward).
  std::vector<int> LearnableParamFirstLayers() const;
  // "layer_name" / param index for each entry of params(), for messages and snapshots.
  const std::vector<std::string>& param_display_names() const { return param_display_names_; }

  // The learnable parameters' gradients as one buffer (what a gradient collective reduces).
  // The net builds it at construction: the diff of each entry of learnable_params() (shared
  // parameters once, through their owner) is a view (SyncedMemory's view constructor) into one
  // SyncedMemory of flat_diff_count() floats, at learnable_param_offsets()[i] floats from its
  // start, in learnable_params() order. Each offset is rounded up to a multiple of
  // kFlatDiffAlignment floats (64 bytes, as a host buffer of its own is aligned; the vectorised
  // GPU paths and cuDNN's graph plans need 16), so consecutive parameters may have
  // up to kFlatDiffAlignment - 1 floats of padding between them; the padding is zero after
  // ClearParamDiffs and no layer or solver writes it. So p->mutable_cpu_diff() and the like
  // keep working, and writes through either are seen by the other. Host and device copies move
  // the whole buffer at once (its sync state is shared by all the views). The layout holds while
  // the parameters keep their shapes: reshaping one beyond its count gives it a diff of its own,
  // and the flat accessors then throw kInternal.
  static constexpr size_t kFlatDiffAlignment = 16;
  size_t flat_diff_count() const { return flat_diff_count_; }
  const std::vector<size_t>& learnable_param_offsets() const { return learnable_param_offsets_; }
  // The whole buffer, on the host or the device (the device ones throw kUnimplemented in a
  // build without CUDA); the mutable ones mark it as written there, as Tensor's accessors do.
  // nullptr when the net has no learnable parameter.
  const float* flat_cpu_diff() const;
  float* mutable_flat_cpu_diff();
  const float* flat_gpu_diff() const;
  float* mutable_flat_gpu_diff();
  // Whether every learnable parameter's diff is still its view of flat_diff_.
  bool FlatDiffIntact() const;
  // The buffer itself, for callers that keep it (nullptr without learnable parameters).
  const std::shared_ptr<SyncedMemory>& flat_diff() const { return flat_diff_; }

  // Keeps the layers whose include/exclude rules accept param.state().
  static caffe::NetParameter FilterNet(const caffe::NetParameter& param);
  static bool StateMeetsRule(const caffe::NetState& state, const caffe::NetStateRule& rule);

 private:
  void Init(const caffe::NetParameter& param);
  void AppendTop(const caffe::NetParameter& param, int layer_id, int top_id,
                 std::map<std::string, int>* available);
  void AppendBottom(const caffe::NetParameter& param, int layer_id, int bottom_id,
                    std::map<std::string, int>* available);
  void AppendParam(const caffe::NetParameter& param, int layer_id, int param_id);
  std::string DescribeLayer(int layer_id) const;
  // Fuses BatchNorm + Scale (+ ReLU) chains and Eltwise SUM + ReLU pairs (see the top of this
  // file); returns how many of each.
  int FuseBatchNormChains();
  int FuseEltwiseRelus();
  // Folds each two-top Split whose bottom an Eltwise SUM of two (and its fused ReLU) computes into
  // that sum's Backward (EltwiseLayer::SumTopDiffs): the sum reads the Split's two top diffs and
  // adds them itself, and the Split does nothing. Returns how many.
  int FoldSplitsIntoSums();
  // Gives the top of each fused BatchNorm chain (in place, needing backward) a blob of its own,
  // named as the chain's blob, and tells the BatchNorm to keep its bottom, renamed
  // "<name> (BatchNorm input)", instead of a normalised copy (BatchNormLayer::KeepInput): the
  // layers after the BatchNorm that read or write the blob take the new one, as do the net's
  // outputs (`available`), and layers whose tops shared the input's data (a Split, a Flatten)
  // are set up again to share the new top's. Returns how many.
  int KeepBatchNormInputs(std::map<std::string, int>* available);
  // Folds each Eltwise SUM of two with coefficients 1 that directly follows a fused BatchNorm +
  // Scale chain without a ReLU, and alone reads its output, into the BatchNorm
  // (BatchNormLayer::FoldSum): the BatchNorm takes the sum's other bottom as its bottom 1 and the
  // sum's top as its top, and the sum and its fused layers are fused into the BatchNorm. The
  // chain's blob, which now only holds the chain's input, is renamed "<name> (BatchNorm input)";
  // asking for the old name says where it went. With keep_inputs the BatchNorm keeps its input
  // for Backward (BatchNormLayer::KeepInput). Returns how many.
  int FoldSumsIntoBatchNorms(bool keep_inputs);
  // What the blob `name` of a BatchNorm chain's input is renamed to by the two above.
  static std::string BatchNormInputName(const std::string& name);
  // Whether layer i exists, has `type`, works in place on blob `blob` alone, has no explicit
  // propagate_down nor loss weight and is not fused yet: what a fused follower must be.
  bool FusableInPlace(int i, int blob, const char* type) const;
  // Tells layers that never run backward to keep nothing for it.
  void DropUnneededBackwardState();
  // Mixed precision on the GPU: keeps in the 16-bit type of its layers (Layer::HalfTensors)
  // every blob that only such layers read and write and that is not an output of the net
  // (Tensor::set_home_type); returns how many (half_tensors.cpp).
  int KeepHalfTensors();
  // On the CPU: keeps in oneDNN's channel blocks (math::CpuChannelBlock) every set of float32
  // blobs that convolutions read or write and that only layers taking blocks touch (the
  // choice of channels_last.hpp); returns how many blobs (blocked_tensors.cpp).
  int KeepBlockedTensors();
  // After a layer's pass on a net with blocked blobs: what it wrote through the NCHW views of
  // `tensors` goes to their homes now, before a tensor sharing a buffer reads it.
  void FlushBlockedTwins(const std::vector<Tensor*>& tensors) const;
  // Puts the learnable parameters' diffs into flat_diff_ (memory_plan.cpp).
  void FlattenParamDiffs();
  // Throws kInternal unless every learnable parameter's diff is still its view of flat_diff_.
  void CheckFlatDiff() const;
  // Calls the after-backward hooks for layer `i` (after its Backward ran) and for the layers
  // fused into it.
  void RunAfterBackward(int i);
  // For each buffer group (see memory_plan.cpp), whether the memory plans must leave it alone.
  std::vector<bool> BlobsOutsideThePlan(const std::vector<int>& group_of_blob,
                                        int num_groups) const;
  // The memory plans' pieces (memory_plan.cpp): the blobs grouped by diff or by data buffer, and
  // the steps for which each group that may share needs its buffer. PlanDiffs adds the diff
  // groups, their steps in Backward counted from `offset`. PlanData adds the data groups that
  // Backward never reads (steps in Forward) and, with `through_backward`, also those it reads, up
  // to the Backward step of their last reader, Backward's steps counted from `offset`.
  struct BufferPlan;
  // A blob group of the training plan that Backward recomputes (ShareTrainingBuffers): the layer
  // that writes it again, the highest and lowest index of the layers whose Backward reads it, the
  // blobs, their buffers in Forward and from the recomputation on, and whether this Backward has
  // recomputed it yet.
  struct Recomputed {
    int layer = -1;
    int first_reader = -1;
    int last_reader = -1;
    std::vector<Tensor*> tensors;
    std::shared_ptr<SyncedMemory> forward_buffer;
    std::shared_ptr<SyncedMemory> backward_buffer;
    bool done = false;
  };
  // At the start of Forward: the recomputed blobs take their Forward buffer again (or, outgrown
  // by a Reshape, a buffer of their own, and leave the plan).
  void RestoreRecomputedBlobs();
  // Before the Backward of layer i: recomputes the blobs whose readers start there.
  void RecomputeBlobsFor(int i);
  void PlanDiffs(BufferPlan* plan, int offset) const;
  void PlanData(BufferPlan* plan, const std::vector<std::string>& keep, bool through_backward,
                int offset) const;

  Context* ctx_;
  NetOptions options_;
  std::string name_;
  caffe::Phase phase_ = caffe::TEST;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::string> layer_names_;
  std::map<std::string, int> layer_index_;
  std::vector<bool> layer_need_backward_;
  std::vector<std::shared_ptr<Tensor>> blobs_;
  std::vector<std::string> blob_names_;
  std::map<std::string, int> blob_index_;
  // Blobs no longer computed (FoldSumsIntoBatchNorms): their name -> the sum computed instead.
  std::map<std::string, std::string> folded_blobs_;
  std::vector<bool> blob_need_backward_;
  std::vector<std::vector<Tensor*>> bottom_vecs_;
  // The bottoms' shapes each layer was last shaped for. Forward reshapes a layer whose bottoms
  // have changed shape since (a Filter's output, a feed of another batch size), as Caffe, which
  // reshapes every layer at every Forward, would.
  std::vector<std::vector<std::vector<int>>> shaped_for_;
  void RecordShapes(int layer_id);
  std::vector<std::vector<int>> bottom_ids_;
  std::vector<std::vector<bool>> bottom_need_backward_;
  std::vector<std::vector<Tensor*>> top_vecs_;
  std::vector<std::vector<int>> top_ids_;
  std::vector<float> blob_loss_weights_;
  std::vector<std::vector<int>> param_id_vecs_;
  std::vector<Tensor*> input_blobs_;
  int num_half_blobs_ = 0;
  int num_nhwc_blobs_ = 0;
  int num_blocked_blobs_ = 0;
  std::vector<Tensor*> output_blobs_;
  std::vector<int> output_blob_indices_;
  std::vector<std::shared_ptr<Tensor>> params_;
  std::vector<int> param_owners_;
  std::vector<std::string> param_display_names_;
  std::vector<std::pair<int, int>> param_layer_indices_;
  std::map<std::string, int> param_names_index_;
  std::vector<Tensor*> learnable_params_;
  std::vector<int> learnable_param_ids_;
  std::vector<float> params_lr_;
  std::vector<bool> has_params_lr_;
  std::vector<float> params_weight_decay_;
  std::vector<bool> has_params_decay_;
  std::shared_ptr<SyncedMemory> flat_diff_;
  size_t flat_diff_count_ = 0;
  std::vector<size_t> learnable_param_offsets_;
  std::vector<std::shared_ptr<SyncedMemory>> flat_diff_views_;  // one per learnable param
  std::vector<std::function<void(int)>> after_backward_;
  std::vector<Recomputed> recomputed_;
};

}  // namespace cortado
