// SPDX-License-Identifier: Apache-2.0
// Solver: the training loop (Caffe's Solver with the shared part of SGDSolver). It builds the
// train net and the test nets from a caffe::SolverParameter, runs forward/backward, computes
// the learning rate from lr_policy, normalizes (iter_size), regularizes (weight_decay),
// clips gradients, lets the update rule turn each gradient into a step, updates the weights,
// tests, displays and snapshots, all as Caffe does and with Caffe's log lines.
//
// Update rules (SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam) live in <rule>_solver.cpp and
// register under the SolverParameter.type string with CORTADO_REGISTER_SOLVER; CreateSolver
// picks one. Their history tensors, in Caffe's order, are what .solverstate files hold.
//
// Determinism: nets are built after seeding the context with random_seed (as Caffe), and the
// context is reseeded at the start of every iteration from (random_seed, iteration) so that
// dropout masks and random data depend only on the seed and the iteration number; a resumed run
// (Restore) also positions the train net's data layers with Layer::Seek(iter * iter_size), and
// thus repeats an uninterrupted run exactly. Without random_seed the base seed comes from the
// clock once. (Data-parallel trainers should give each rank random_seed + rank, as Caffe does.)
//
// Differences from Caffe: failures throw cortado::Error instead of aborting; an unknown
// lr_policy or regularization_type is reported when the solver is built; a snapshot whose
// history does not match the net is rejected before anything changes; learned_net paths that
// do not exist as written are also looked up next to the state file.
// A Solver is used by one thread at a time; the Context must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/registry.hpp"
#include "core/tensor.hpp"
#include "net/net.hpp"
#include "proto/caffe.pb.h"

namespace cortado {

// What the action callback asks the training loop to do (Caffe's SolverAction).
enum class SolverAction { kNone, kStop, kSnapshot };

// A display iteration, as Caffe logs it: `Iteration <iter> (...), loss = <loss>` and `lr =`.
struct Display {
  int iter = 0;
  float loss = 0.0f;           // the smoothed loss (average_loss)
  float learning_rate = 0.0f;  // the rate of this iteration's update
  int iterations = 0;          // iterations since the previous display (0 for the closing one)
  double seconds = 0.0;        // the time they took; negative for Caffe's closing display
                               // (the loss of the final weights, after the last update)
};

class Solver {
 public:
  using ActionCallback = std::function<SolverAction()>;
  using Hook = std::function<void()>;

  // Builds the train net and the test nets (Caffe's InitTrainNet / InitTestNets). Throws
  // kInvalidArgument for an inconsistent parameter (no or several train nets, test_iter counts,
  // unknown lr_policy or regularization_type, average_loss < 1, iter_size < 1), kNotFound for a
  // missing net file (relative paths are relative to the current directory, as in Caffe). An
  // unwritable snapshot_prefix is reported by the first Step (see CheckSnapshotPrefix). The
  // nets are built with `net_options`; with share_buffers the train net's memory is planned
  // (Net::ShareDiffBuffers and ShareDataBuffers) and the test nets' data buffers are shared.
  Solver(const caffe::SolverParameter& param, Context* ctx, const NetOptions& net_options = {});
  virtual ~Solver();
  Solver(const Solver&) = delete;
  Solver& operator=(const Solver&) = delete;

  // The SolverParameter.type this rule registers under ("SGD").
  virtual const char* type() const = 0;

  // Restores `resume_file` when not empty, trains up to max_iter, snapshots at the end if
  // snapshot_after_train, then (unless stopped early) runs Caffe's final display and test pass.
  void Solve(const std::string& resume_file = "");
  // Runs `iters` iterations (fewer when the action callback asks to stop).
  void Step(int iters);
  // Runs every test net once (Caffe's TestAll); mean scores are in test_scores().
  void TestAll();
  // Writes <prefix>_iter_<iter>.caffemodel[.h5], then the matching .solverstate[.h5], then
  // <prefix>_iter_<iter>.sha256 with the SHA-256 of both as read back (sha256sum's format, as
  // the Spark side writes it; see solvers/snapshot.hpp).
  void Snapshot();
  // What Snapshot writes, without files: the model (Net::ToProto, with diffs when
  // snapshot_diff) and the state naming `learned_net` as its model. Serialised, these are the
  // bytes of the binary-proto files.
  caffe::NetParameter ModelProto() const;
  caffe::SolverState StateProto(const std::string& learned_net) const;
  // Loads a .solverstate (binary or HDF5, by content): the weights from its learned_net, the
  // history, iter and current_step. A history of the wrong length or shapes, or weights that do
  // not fit, throw kInvalidArgument naming the file and leave the solver unchanged. When the
  // snapshot's .sha256 is beside the state file, the state and its model are checked against it
  // first: a file that does not match is kIo naming it and both digests (the snapshot was
  // damaged after it was written), and a malformed or foreign line names the .sha256's
  // file:line. Without a .sha256 (Caffe's snapshots) nothing is checked.
  void Restore(const std::string& state_file);
  // The same from protos in memory; `state_source` and `model_source` name them in errors.
  void Restore(const caffe::SolverState& state, const caffe::NetParameter& weights,
               const std::string& state_source, const std::string& model_source);
  // Throws kIo now when snapshots go to files and snapshot_prefix is not writable (Caffe's
  // CheckSnapshotWritePermissions); Step calls it first. Nothing to check with a writer.
  void CheckSnapshotPrefix();

  // The learning rate for the current iteration (Caffe's GetLearningRate); for "step" and
  // "multistep" it also advances current_step.
  float GetLearningRate();

  // Polled once per iteration and once per test batch (signals, time limits).
  void set_action_callback(ActionCallback callback) { action_callback_ = std::move(callback); }
  // Called at the start of each iteration, before forward/backward.
  void set_on_start(Hook hook) { on_start_ = std::move(hook); }
  // Called after the gradients of an iteration are accumulated and before the update (the
  // data-parallel trainer averages gradients across replicas here), with the iteration's loss
  // (the mean over iter_size batches), before it is smoothed and displayed: the hook may replace
  // it (with the mean over every replica's, so the display shows the loss of the whole batch).
  using GradientsHook = std::function<void(float* loss)>;
  void set_on_gradients_ready(GradientsHook hook) { on_gradients_ready_ = std::move(hook); }
  // Called at each display iteration after its update (and for Caffe's closing display).
  void set_on_display(std::function<void(const Display&)> hook) { on_display_ = std::move(hook); }
  // Called after each complete TestAll with the iteration; the scores are in TestScores().
  void set_on_test(std::function<void(int iter)> hook) { on_test_ = std::move(hook); }
  // Replaces Snapshot() wherever the loop snapshots (the interval, snapshot_after_train, an
  // action): the writer stores ModelProto/StateProto elsewhere (bytes for the JVM).
  void set_snapshot_writer(Hook writer) { snapshot_writer_ = std::move(writer); }

  const caffe::SolverParameter& param() const { return param_; }
  Net* net() const { return net_.get(); }
  const std::vector<std::unique_ptr<Net>>& test_nets() const { return test_nets_; }
  Context* context() const { return ctx_; }
  int iter() const { return iter_; }
  int current_step() const { return current_step_; }
  float smoothed_loss() const { return smoothed_loss_; }
  // The loss scale now (1 without loss scaling; SolverParameter.loss_scale) and the updates
  // skipped so far for gradients that were not finite.
  float loss_scale() const { return loss_scale_; }
  int skipped_updates() const { return skipped_updates_; }
  bool requested_early_exit() const { return requested_early_exit_; }
  // One tensor per learnable parameter, repeated once per history set (AdaDelta, Adam: two).
  const std::vector<std::shared_ptr<Tensor>>& history() const { return history_; }
  // Mean of each test net output element over the last test pass of each test net.
  const std::vector<std::vector<float>>& test_scores() const { return test_scores_; }
  // test_scores() flattened, and their names: "<test net index>/<blob>", with "[k]" for each
  // element of a blob of several values ("0/accuracy").
  std::vector<float> TestScores() const;
  std::vector<std::string> TestOutputNames() const;
  // snapshot_prefix + "_iter_" + iter + extension.
  std::string SnapshotFilename(const std::string& extension) const;

  // The learning-rate policies GetLearningRate knows.
  static const std::vector<std::string>& LrPolicies();

 protected:
  // Turns the (normalized, regularized, clipped) gradient of learnable parameter `param_id` into
  // the step that Net::Update subtracts, written to the parameter's diff.
  virtual void ComputeUpdateValue(int param_id, float rate) = 0;
  // The whole step at once (normalize, regularize, update value and Net::Update), for rules
  // that have a fused version on the current device; returns false to take the per-parameter
  // path. Gradients are clipped before.
  virtual bool ApplyFusedUpdate(float /*rate*/) { return false; }
  // Appends one zeroed history tensor per learnable parameter (a second set for AdaDelta/Adam).
  void AddHistorySet();

  caffe::SolverParameter param_;
  Context* ctx_;
  NetOptions net_options_;
  std::unique_ptr<Net> net_;
  std::vector<std::unique_ptr<Net>> test_nets_;
  int iter_ = 0;
  int current_step_ = 0;
  std::vector<std::shared_ptr<Tensor>> history_;
  // Scratch space, one tensor per learnable parameter, as in Caffe's SGDSolver.
  std::vector<std::shared_ptr<Tensor>> update_;
  std::vector<std::shared_ptr<Tensor>> temp_;

 private:
  void InitTrainNet();
  void InitTestNets();
  void Test(int test_net_id);
  void ApplyUpdate();
  void ClipGradients();
  void Normalize(int param_id);
  void Regularize(int param_id);
  void UpdateSmoothedLoss(float loss, int start_iter, int average_loss);
  SolverAction RequestedAction() const;
  // The snapshot writer, or Snapshot().
  void TakeSnapshot();
  // Reseeds the context from (base seed, iteration, purpose).
  void SeedIteration(int purpose);
  std::string LearnableParamName(int param_id) const;
  // Loss scaling: sets the loss tops' diffs (Caffe's loss weights, which Forward reads to sum
  // the loss and Backward starts from) to their weights times `scale`.
  void ApplyLossScale(float scale);
  // After the gradients are complete (and exchanged): false when they are not all finite (the
  // update is then skipped and the scale halved); otherwise divides them by the scale and
  // doubles it after loss_scale_window finite updates in a row.
  bool UnscaleGradients();

  int64_t base_seed_ = 0;
  float smoothed_loss_ = 0.0f;
  std::vector<float> losses_;
  bool requested_early_exit_ = false;
  std::vector<std::vector<float>> test_scores_;
  ActionCallback action_callback_;
  Hook on_start_;
  GradientsHook on_gradients_ready_;
  std::function<void(const Display&)> on_display_;
  std::function<void(int)> on_test_;
  Hook snapshot_writer_;
  bool snapshot_prefix_checked_ = false;
  float last_rate_ = 0.0f;
  bool loss_scaling_ = false;
  float loss_scale_ = 1.0f;
  float applied_loss_scale_ = 1.0f;  // the scale the loss tops' diffs hold now
  int loss_scale_good_steps_ = 0;
  int skipped_updates_ = 0;
  Display pending_display_;
  double last_display_time_ = 0.0;
  int iterations_last_ = 0;
};

using SolverRegistry = Registry<Solver, const caffe::SolverParameter&, Context*, const NetOptions&>;

// Creates the solver named by param.type(), its nets built with `net_options`; an unknown type
// lists the known ones.
// Sets how `ctx` computes for a solver's `precision` (Context::allow_tf32, half_compute) and
// logs it; FLOAT16 and BFLOAT16 allow TF32 for the float32 work outside their layers. Call it
// before building nets.
void SetPrecision(Context& ctx, caffe::SolverParameter::Precision precision);

std::unique_ptr<Solver> CreateSolver(const caffe::SolverParameter& param, Context* ctx,
                                     const NetOptions& net_options = {});

// Reads a solver prototxt (upgrading old fields) and applies Caffe's snapshot_prefix rule
// (SnapshotPrefixFor, the directory checked on the local file system).
caffe::SolverParameter ReadSolverFile(const std::string& path);

// Makes `param` build no test nets: test_iter, test_net, test_net_param and test_state cleared,
// test_interval 0.
void ClearTestNets(caffe::SolverParameter* param);

// Caffe's snapshot_prefix rule for the solver file at `solver_path`: an empty prefix becomes the
// solver file's path without extension; a prefix naming a directory (`prefix_is_directory`, or
// ending in '/') gets the solver file's stem appended; any other prefix is kept.
std::string SnapshotPrefixFor(const std::string& solver_path, const std::string& prefix,
                              bool prefix_is_directory);

}  // namespace cortado

// Ends an update rule's .cpp: CORTADO_REGISTER_SOLVER(SGD, SGDSolver);
#define CORTADO_REGISTER_SOLVER(type, Class)                                                   \
  static ::cortado::Registerer<::cortado::Solver, const ::caffe::SolverParameter&,             \
                               ::cortado::Context*, const ::cortado::NetOptions&>              \
      cortado_solver_registerer_##type(                                                        \
          #type,                                                                               \
          [](const ::caffe::SolverParameter& param, ::cortado::Context* ctx,                   \
             const ::cortado::NetOptions& net_options) -> std::unique_ptr<::cortado::Solver> { \
            return std::make_unique<Class>(param, ctx, net_options);                           \
          })
