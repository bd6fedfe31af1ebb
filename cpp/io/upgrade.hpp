// SPDX-License-Identifier: Apache-2.0
// The upgrades Caffe applies to old model and solver files, so that they load unchanged
// (Caffe: src/caffe/util/upgrade_proto.cpp). In the order they run:
//
//  1. V0 -> V1: `layers { layer { type: "conv" ... } bottom: ... }` entries (V0LayerParameter)
//     become V1 layers; "padding" layers are folded into the conv or pool layer they feed, and
//     the flat V0 fields (num_output, kernelsize, batchsize, meanfile, det_*, ...) move into
//     the matching *_param message. V0 fields on a layer type that has no such parameter are
//     ignored with a warning, as Caffe does.
//  2. Data transformation: scale, mean_file, crop_size and mirror on the data_param,
//     image_data_param or window_data_param of a V1 layer move into its transform_param.
//  3. V1 -> current: `layers { type: CONVOLUTION blobs_lr: 1 ... }` becomes
//     `layer { type: "Convolution" param { lr_mult: 1 } ... }`; param names, blob_share_mode,
//     blobs_lr and weight_decay become ParamSpec name/share_mode/lr_mult/decay_mult, and every
//     *_param, the blobs, include/exclude rules and loss weights are carried over.
//  4. Net-level `input:` with `input_shape:` or `input_dim:` (4 values per input) becomes an
//     Input layer named "input" in front of the others, with the same blob names. Names alone
//     (what old .caffemodel files hold) are simply dropped. The old fields are cleared.
//  5. BatchNorm layers that declare 3 param specs (old prototxts pinned the statistics with
//     `param { lr_mult: 0 }` x3) get lr_mult and decay_mult 0 on all three, keeping any names,
//     as BVLC Caffe master does. (An earlier Caffe dropped the three specs instead; the layer
//     behaves the same either way, but keeping them keeps param sharing by name working.)
//  6. Solver: the `solver_type` enum becomes the `type` string (SGD, Nesterov, AdaGrad,
//     RMSProp, AdaDelta, Adam). Nets embedded in the solver (net_param, train_net_param,
//     test_net_param) are upgraded too, which Caffe does not do.
//
// Each step that changes something logs one INFO line naming `source` (the file) and what it
// did. Files Caffe would reject (or crash on) throw kParse naming `source` and the layer: an
// unknown V0 type, a padding layer feeding something other than conv/pool, a V1 layer with no
// type, NONE or a type number this build does not know, input_dim/input_shape counts that do
// not match the inputs, and solver_type disagreeing with type. Where Caffe logs and drops
// data, Cortado throws instead: a net holding both old `layers` and new `layer` entries is an
// error (Caffe silently discards the `layer` entries).
//
// Weight blobs are moved, not copied, so upgrading a large .caffemodel does not double its
// memory. If an upgrade throws, *param is left in an unspecified (but valid) state.
// All functions are thread-safe for distinct messages.
#pragma once

#include <string>

#include "proto/caffe.pb.h"

namespace cortado::io {

// True when UpgradeNetAsNeeded would change `param`.
bool NetNeedsUpgrade(const caffe::NetParameter& param);
// Applies steps 1-5 as needed; returns true when it changed anything.
bool UpgradeNetAsNeeded(const std::string& source, caffe::NetParameter* param);
// True when UpgradeSolverAsNeeded would change `param`.
bool SolverNeedsUpgrade(const caffe::SolverParameter& param);
// Applies step 6 (and steps 1-5 to embedded nets); returns true when it changed anything.
bool UpgradeSolverAsNeeded(const std::string& source, caffe::SolverParameter* param);

// Caffe's layer type string for a V1 enum value ("Convolution" for CONVOLUTION, "SoftmaxWithLoss"
// for SOFTMAX_LOSS); empty for NONE and for numbers the enum does not define.
std::string V1LayerTypeName(caffe::V1LayerParameter::LayerType type);
// The SolverParameter.type string for a deprecated solver_type value; empty if undefined.
std::string SolverTypeName(caffe::SolverParameter::SolverType type);

}  // namespace cortado::io
