// SPDX-License-Identifier: Apache-2.0
// NetOptions: how a Net is built, beyond what its NetParameter says. The library never reads the
// environment for these: tools at the process's edge (the CLI, the JNI shim) call
// NetOptionsFromEnvironment and pass the result down to Net, Solver and Trainer.
#pragma once

namespace cortado {

struct NetOptions {
  // Fuse each in-place BatchNorm + per-channel Scale (+ ReLU) chain, and each Eltwise SUM
  // followed in place by a ReLU, into their first layer, and (with fold_splits) fold the Split of
  // such a sum's output into the sum's Backward (net.hpp). Off: every layer runs on its own (for
  // comparing against, or inspecting the intermediate blobs and their gradients).
  bool fuse = true;
  // With fuse: the folded Splits alone. Off: each Split adds its tops' gradients into its
  // bottom's, as in Caffe (the same bits; for measuring the fold, or to read that gradient).
  bool fold_splits = true;
  // Let the Solver plan its nets' memory (Net::ShareDiffBuffers and ShareDataBuffers: blobs
  // never alive together share buffers). Off: one data and one diff buffer per blob, so every
  // blob's data and diff are readable after a step. Net itself plans only when asked; this is
  // the caller's switch (net->options().share_buffers).
  bool share_buffers = true;
  // In that plan, let a top that Backward reads but its layer can write again from what it keeps
  // (a BatchNorm + Scale + ReLU's output, from BatchNorm's normalised copy) share buffers once
  // Forward is past it, and recompute it just before the first Backward that reads it
  // (Layer::CanRecomputeTops). Off: such tops keep their buffer from Forward to Backward.
  bool recompute = true;
  // Whether each fused BatchNorm chain that runs backward gets a top of its own, so that the
  // BatchNorm keeps its input rather than a normalised copy and its forward pass writes one
  // tensor instead of two (Net::KeepBatchNormInputs, BatchNormLayer::KeepInput): on none, on
  // nets on a CUDA device (the CPU passes keep their copy either way, so there it would only
  // cost memory), or on every net. TRAIN nets only: TEST nets run forward alone. Off by default:
  // on an H200, ResNet-50 at batch 128 in float16 took 28.7-29.0 ms per iteration with it
  // against 25.3-25.4 without, its backward passes normalising the input again costing more
  // than the forward passes save (bench/RESULTS.md).
  enum class BatchNormInputs { kNever, kOnGpus, kAlways };
  BatchNormInputs keep_batch_norm_inputs = BatchNormInputs::kNever;
  // With fuse: where a fused BatchNorm + Scale chain without a ReLU (a residual block's last)
  // feeds only an Eltwise SUM of two with coefficients 1 (the residual sum, its ReLU fused, its
  // Split folded), the BatchNorm's forward pass adds the sum's other bottom and applies the sum's
  // ReLU, writing the sum's output directly; the chain's own output is never written nor read,
  // nor is its gradient (Net::FoldSumsIntoBatchNorms, BatchNormLayer::FoldSum). The same bits.
  // In no net, in TRAIN nets (the default), or in every net. TEST nets keep the chains' outputs
  // by default, so that any blob can be read as features; a training net's time is where the
  // fold counts: on an H200, ResNet-50 at batch 128 in float16 took 23.9 ms per iteration with
  // it against 25.3 without (on the CPU, ResNet-50's whole iteration did not move;
  // bench/RESULTS.md).
  enum class SumFolds { kNever, kTrainNets, kAlways };
  SumFolds fold_sums_into_batch_norms = SumFolds::kTrainNets;
  // On the CPU with oneDNN: keep the blobs between convolutions and the BatchNorm chains after
  // them in oneDNN's channel blocks (Net::KeepBlockedTensors), so that no convolution reorders
  // its input and output to and from NCHW. The same bits. Off: every blob NCHW.
  bool cpu_blocks = true;
};

// The defaults, with CORTADO_FUSE=0 setting `fuse` false, CORTADO_FOLD_SPLITS=0 setting
// `fold_splits` false, CORTADO_SHARE_BUFFERS=0 setting `share_buffers` false and
// CORTADO_RECOMPUTE=0 setting `recompute` false, CORTADO_CPU_BLOCKS=0 setting `cpu_blocks` false,
// CORTADO_BN_KEEP_INPUTS=1 setting `keep_batch_norm_inputs` to kOnGpus, CORTADO_FOLD_SUMS=0 setting
// `fold_sums_into_batch_norms` to kNever and CORTADO_FOLD_SUMS=1 to kAlways (any other value,
// or none, keeps the default).
// The only place the library reads these variables; only the CLI and the JNI shim call it.
NetOptions NetOptionsFromEnvironment();

}  // namespace cortado
