// SPDX-License-Identifier: Apache-2.0
// Net: a DAG of layers built from a NetParameter (Caffe's Net).
//
// Building follows Caffe: layers are filtered by the net state (phase, level, stages) against
// each layer's include/exclude rules, Split layers are inserted where one top feeds several
// bottoms, tops named like a bottom are computed in place, parameters named alike are shared,
// and backward runs only where it can reach a loss. Errors name the layer, its type and the
// shapes of its bottoms. A Net is used by one thread at a time.
//
// Then, unless the environment sets CORTADO_FUSE=0, each in-place BatchNorm followed in place
// by a per-channel Scale (and a ReLU) is fused: the BatchNorm layer computes all of them and the
// others do nothing (BatchNormLayer::FuseScale). A partial ForwardFromTo that ends between
// fused layers therefore runs the whole group.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/tensor.hpp"
#include "layers/layer.hpp"
#include "proto/caffe.pb.h"

namespace cortado {

class Net {
 public:
  // Builds the net for param.state() (phase defaults to TEST, as in Caffe).
  Net(const caffe::NetParameter& param, Context* ctx);
  // Reads a prototxt (upgrading old formats) and builds it for `phase`, `level` and `stages`.
  Net(const std::string& path, caffe::Phase phase, Context* ctx, int level = 0,
      const std::vector<std::string>& stages = {});
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  // Runs every layer forward; returns the total weighted loss.
  float Forward();
  float ForwardFromTo(int start, int end);
  // Runs backward over the layers that need it (param diffs accumulate: see ClearParamDiffs).
  void Backward();
  void BackwardFromTo(int start, int end);
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
  // Whether callers should plan: false when the environment sets CORTADO_SHARE_BUFFERS=0 (one
  // buffer of each kind per blob, every blob's data and diff readable after a step).
  static bool BufferSharingWanted();
  // For nets that only ever run Forward (test nets): Backward then does nothing, and layers drop
  // what they keep only for it (BatchNorm's normalised copy).
  void SetForwardOnly();
  // Zeroes the diffs of the learnable parameters.
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
  // "layer_name" / param index for each entry of params(), for messages and snapshots.
  const std::vector<std::string>& param_display_names() const { return param_display_names_; }

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
  // Whether layer i exists, has `type`, works in place on blob `blob` alone, has no explicit
  // propagate_down nor loss weight and is not fused yet: what a fused follower must be.
  bool FusableInPlace(int i, int blob, const char* type) const;
  // Tells layers that never run backward to keep nothing for it.
  void DropUnneededBackwardState();
  // For each buffer group (see net.cpp), whether the memory plans must leave it alone.
  std::vector<bool> BlobsOutsideThePlan(const std::vector<int>& group_of_blob,
                                        int num_groups) const;

  Context* ctx_;
  std::string name_;
  caffe::Phase phase_ = caffe::TEST;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::string> layer_names_;
  std::map<std::string, int> layer_index_;
  std::vector<bool> layer_need_backward_;
  std::vector<std::shared_ptr<Tensor>> blobs_;
  std::vector<std::string> blob_names_;
  std::map<std::string, int> blob_index_;
  std::vector<bool> blob_need_backward_;
  std::vector<std::vector<Tensor*>> bottom_vecs_;
  std::vector<std::vector<int>> bottom_ids_;
  std::vector<std::vector<bool>> bottom_need_backward_;
  std::vector<std::vector<Tensor*>> top_vecs_;
  std::vector<std::vector<int>> top_ids_;
  std::vector<float> blob_loss_weights_;
  std::vector<std::vector<int>> param_id_vecs_;
  std::vector<Tensor*> input_blobs_;
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
};

}  // namespace cortado
