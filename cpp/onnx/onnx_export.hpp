// SPDX-License-Identifier: Apache-2.0
// ONNX export: a Caffe net with its trained weights as an ONNX model (onnx.proto, the schema ONNX
// publishes, compiled by protoc like caffe.proto). Every layer with an ONNX counterpart becomes
// the nodes that compute exactly what the Caffe layer computes (docs/onnx.md has the table);
// data layers' tops become the graph's inputs, losses and accuracies are left out (what a deploy
// net means), and any other layer without a counterpart is refused by name and type.
#pragma once

#include <string>

#include "net/net.hpp"
#include "net/net_options.hpp"
#include "proto/onnx.pb.h"

namespace cortado {

inline constexpr int kOnnxMinOpset = 13;
inline constexpr int kOnnxMaxOpset = 17;

struct OnnxExportOptions {
  // The default-domain opset the model declares, kOnnxMinOpset..kOnnxMaxOpset.
  int opset = kOnnxMinOpset;
  // Axis 0 of every graph input and output is the symbolic "N", so that one model runs any batch
  // size; where a layer's shapes tie the batch (a Reshape over axis 0) the export keeps the net's
  // own batch size there and says so in the node's doc_string. Off: the net's shapes, as built.
  bool dynamic_batch = true;
};

// How a net to export must be built: every layer on its own (no fusion), no shared buffers.
NetOptions OnnxExportNetOptions();

// The ONNX model of `net`, built in the TEST phase with OnnxExportNetOptions() and its trained
// weights loaded; the graph is named after the net, its inputs and outputs after the net's blobs.
// Throws kInvalidArgument naming the layer and its type for a layer without a counterpart, and
// for options out of range.
onnx::ModelProto ExportOnnx(const Net& net, const OnnxExportOptions& options = {});

}  // namespace cortado
