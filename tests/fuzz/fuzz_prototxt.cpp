// SPDX-License-Identifier: Apache-2.0
// The prototxt text parser and what follows it on a user's net: Caffe's format upgrades, the
// net's construction (every layer's parameter checks and shape rules) and, for a small net, one
// forward pass; then the net again with every graph rewrite and the training memory plan, and
// for a small one a forward and backward pass. The same text is also read as a solver prototxt.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/context.hpp"
#include "data/feed_data_layer.hpp"
#include "fuzz/fuzz_util.hpp"
#include "io/proto_io.hpp"
#include "io/upgrade.hpp"
#include "net/net.hpp"
#include "proto/caffe.pb.h"

namespace {

// Nets whose blobs hold at most this many values in all run forward once (a bound on the time
// one input takes).
constexpr double kForwardValues = 1 << 16;

// Layers that read files or wait for a feeder: built, never run.
bool ReadsData(const caffe::NetParameter& param) {
  for (const auto& layer : param.layer()) {
    const std::string& type = layer.type();
    if (type == "Data" || type == "HDF5Data" || type == "ImageData" || type == "WindowData" ||
        type == "MemoryData" || cortado::FeedDataLayer::IsFeedLayer(layer)) {
      return true;
    }
  }
  return false;
}

bool Small(const cortado::Net& net) {
  double values = 0;
  for (const auto& blob : net.blobs()) values += blob->count();
  for (const auto& param_blob : net.params()) values += param_blob->count();
  return values <= kForwardValues;
}

void BuildAndRun(const caffe::NetParameter& param) {
  cortado::Context ctx(cortado::Device::Cpu(), 1);
  {
    // As the tools build a net by default; a small one runs forward once.
    cortado::Net net(param, &ctx, cortado::NetOptions{});
    if (ReadsData(param)) return;
    if (Small(net)) net.Forward();
  }
  // As a training run with every rewrite of the graph on (fused chains keeping their inputs,
  // sums folded into BatchNorms) and the solver's memory plan over it; a small one runs forward
  // and backward once.
  cortado::NetOptions every;
  every.keep_batch_norm_inputs = cortado::NetOptions::BatchNormInputs::kAlways;
  every.fold_sums_into_batch_norms = cortado::NetOptions::SumFolds::kAlways;
  cortado::Net net(param, &ctx, every);
  net.ShareTrainingBuffers();
  if (Small(net)) net.ForwardBackward();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cortado::fuzz::SetUpOnce();
  const std::string text(reinterpret_cast<const char*>(data), size);
  cortado::fuzz::ExpectErrorsOnly([&] {
    caffe::NetParameter param;
    cortado::io::ReadProtoFromTextString(text, "fuzz.prototxt", &param);
    cortado::io::UpgradeNetAsNeeded("fuzz.prototxt", &param);
    cortado::io::CheckNetHasLayers(param, "fuzz.prototxt");
    BuildAndRun(param);
  });
  cortado::fuzz::ExpectErrorsOnly([&] {
    caffe::SolverParameter solver;
    cortado::io::ReadProtoFromTextString(text, "fuzz_solver.prototxt", &solver);
    cortado::io::UpgradeSolverAsNeeded("fuzz_solver.prototxt", &solver);
  });
  return 0;
}
