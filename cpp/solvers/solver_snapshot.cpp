// SPDX-License-Identifier: Apache-2.0
// The solver's snapshots: the file names, the model and state it writes (model, state, then
// their digests), and Restore from a state file or from protos already read; the solver file's
// snapshot_prefix rules. The training loop is in solver.cpp.
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "io/proto_io.hpp"
#include "solvers/snapshot.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

namespace fs = std::filesystem;

// The model a solver state names, as written or (when it was moved) next to the state file.
std::string ResolveLearnedNet(const std::string& state_file, const std::string& learned_net) {
  std::error_code ec;
  if (fs::exists(learned_net, ec)) return learned_net;
  const fs::path dir = fs::path(state_file).parent_path();
  std::vector<fs::path> candidates;
  if (fs::path(learned_net).is_relative()) candidates.push_back(dir / learned_net);
  candidates.push_back(dir / fs::path(learned_net).filename());
  for (const auto& candidate : candidates) {
    if (fs::exists(candidate, ec)) return candidate.string();
  }
  CORTADO_THROW(kNotFound, "{}: its learned_net '{}' does not exist (also looked for '{}')",
                state_file, learned_net, candidates.back().string());
}

}  // namespace

std::string Solver::SnapshotFilename(const std::string& extension) const {
  return fmt::format("{}_iter_{}{}", param_.snapshot_prefix(), iter_, extension);
}

void Solver::CheckSnapshotPrefix() {
  // Caffe's CheckSnapshotWritePermissions: fail now rather than after hours of training. Only
  // for snapshots written to files: a snapshot writer stores them elsewhere.
  if (snapshot_writer_ || snapshot_prefix_checked_) return;
  if (param_.snapshot() <= 0 && !param_.snapshot_after_train()) return;
  const std::string probe = SnapshotFilename(".tempfile");
  std::ofstream out(probe);
  if (!out.good()) {
    CORTADO_THROW(kIo,
                  "cannot write to snapshot_prefix '{}' (could not create '{}'); make sure "
                  "the directory exists and is writable",
                  param_.snapshot_prefix(), probe);
  }
  out.close();
  std::remove(probe.c_str());
  snapshot_prefix_checked_ = true;
}

void Solver::TakeSnapshot() {
  if (snapshot_writer_) {
    snapshot_writer_();
  } else {
    Snapshot();
  }
}

caffe::NetParameter Solver::ModelProto() const {
  caffe::NetParameter net_param;
  net_->ToProto(&net_param, param_.snapshot_diff());
  return net_param;
}

caffe::SolverState Solver::StateProto(const std::string& learned_net) const {
  caffe::SolverState state;
  state.set_iter(iter_);
  state.set_learned_net(learned_net);
  state.set_current_step(current_step_);
  if (loss_scaling_) {
    state.set_loss_scale(loss_scale_);
    state.set_loss_scale_good_steps(loss_scale_good_steps_);
  }
  for (const auto& h : history_) h->ToProto(state.add_history());
  return state;
}

void Solver::Snapshot() {
  const bool hdf5 = param_.snapshot_format() == caffe::SolverParameter::HDF5;
  const auto format = param_.snapshot_format();
  const std::string context = fmt::format("snapshot at iteration {}", iter_);
  // The model goes first: a state file must never name a model that is not there.
  const std::string model_file = SnapshotFilename(hdf5 ? ".caffemodel.h5" : ".caffemodel");
  CORTADO_LOG_INFO("Snapshotting to {} file {}", hdf5 ? "HDF5" : "binary proto", model_file);
  const caffe::NetParameter net_param = ModelProto();
  const std::string model_digest = WithContext(context, [&] {
    return snapshot::WriteModel(net_param, model_file, format, param_.snapshot_diff());
  });

  const caffe::SolverState state = StateProto(model_file);
  const std::string state_file = SnapshotFilename(hdf5 ? ".solverstate.h5" : ".solverstate");
  CORTADO_LOG_INFO("Snapshotting solver state to {} file {}", hdf5 ? "HDF5" : "binary proto",
                   state_file);
  const std::string state_digest =
      WithContext(context, [&] { return snapshot::WriteState(state, state_file, format); });

  // The digests go last, from the files as read back (as the Spark side's Snapshots.scala
  // does): a snapshot with its .sha256 is complete, and one damaged later is refused by Restore.
  WithContext(context, [&] {
    snapshot::WriteDigests(SnapshotFilename(".sha256"),
                           {{model_file, model_digest}, {state_file, state_digest}});
  });
}

void Solver::Restore(const std::string& state_file) {
  CORTADO_LOG_INFO("Restoring previous solver status from {}", state_file);
  // With the snapshot's .sha256 beside it, the state is checked before it is parsed and its
  // model before it is read; a snapshot without one (Caffe's, older Cortado's) loads as it is.
  const std::string digests_file = snapshot::DigestsFileFor(state_file);
  std::optional<snapshot::Digests> digests;
  if (!digests_file.empty()) digests = snapshot::Digests::ReadIfPresent(digests_file);
  if (digests) digests->Check(state_file);
  const caffe::SolverState state = snapshot::ReadState(state_file);
  caffe::NetParameter weights;
  std::string model_file;
  if (!state.learned_net().empty()) {
    model_file = ResolveLearnedNet(state_file, state.learned_net());
    if (digests) digests->Check(model_file);
    weights = snapshot::ReadModel(model_file);
  }
  if (digests) {
    CORTADO_LOG_INFO("{} and its model match the SHA-256 digests in {}", state_file, digests_file);
  }
  Restore(
      state, weights, state_file,
      model_file.empty() ? "" : fmt::format("{} (the learned_net of {})", model_file, state_file));
}

void Solver::Restore(const caffe::SolverState& state, const caffe::NetParameter& weights,
                     const std::string& state_source, const std::string& model_source) {
  // Check everything before changing anything.
  if (state.history_size() != static_cast<int>(history_.size())) {
    CORTADO_THROW(kInvalidArgument,
                  "{}: the solver state holds {} history blob(s) but the {} solver of net '{}' "
                  "has {} ({} learnable parameter(s))",
                  state_source, state.history_size(), type(), net_->name(), history_.size(),
                  net_->learnable_params().size());
  }
  const int num_params = static_cast<int>(net_->learnable_params().size());
  for (int i = 0; i < state.history_size(); ++i) {
    const caffe::BlobProto& blob = state.history(i);
    const int param_id = num_params > 0 ? i % num_params : 0;
    const int count = history_[i]->count();
    const bool sizes_ok =
        blob.double_data_size() > 0 ? blob.double_data_size() == count : blob.data_size() == count;
    if (!history_[i]->ShapeEquals(blob) || !sizes_ok) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: history blob {} (parameter {} '{}') has shape {} ({} values) but the "
                    "net's parameter has shape {}",
                    state_source, i, param_id, LearnableParamName(param_id), ProtoShapeString(blob),
                    blob.double_data_size() > 0 ? blob.double_data_size() : blob.data_size(),
                    history_[i]->ShapeString());
    }
  }
  // Copy the weights; if they do not fit, put the old values back so nothing changes.
  std::vector<std::vector<float>> backup;
  for (const auto& p : net_->params())
    backup.emplace_back(p->cpu_data(), p->cpu_data() + p->count());
  WithContext(model_source, [&] {
    try {
      net_->CopyTrainedLayersFrom(weights);
    } catch (const Error&) {
      for (size_t i = 0; i < backup.size(); ++i) {
        std::copy(backup[i].begin(), backup[i].end(), net_->params()[i]->mutable_cpu_data());
      }
      throw;
    }
  });
  for (int i = 0; i < state.history_size(); ++i) history_[i]->FromProto(state.history(i), false);
  iter_ = state.iter();
  current_step_ = state.current_step();
  if (loss_scaling_ && state.has_loss_scale() && state.loss_scale() > 0.0f) {
    loss_scale_ = state.loss_scale();
    loss_scale_good_steps_ = state.loss_scale_good_steps();
  }
  // Data layers resume where an uninterrupted run would be (iter_size batches per iteration).
  const int64_t batch = static_cast<int64_t>(iter_) * param_.iter_size();
  for (const auto& layer : net_->layers()) layer->Seek(batch);
}

std::string SnapshotPrefixFor(const std::string& solver_path, const std::string& prefix,
                              bool prefix_is_directory) {
  if (prefix.empty()) return fs::path(solver_path).replace_extension().string();
  if (prefix_is_directory || prefix.back() == '/') {
    std::string dir = prefix;
    if (dir.back() != '/') dir += '/';
    return dir + fs::path(solver_path).stem().string();
  }
  return prefix;
}

caffe::SolverParameter ReadSolverFile(const std::string& path) {
  caffe::SolverParameter param = io::ReadSolverParameterFromTextFile(path);
  std::error_code ec;
  if (!param.has_snapshot_prefix()) {
    param.set_snapshot_prefix(SnapshotPrefixFor(path, "", false));
    CORTADO_LOG_INFO("snapshot_prefix was not specified and is set to {}", param.snapshot_prefix());
  } else if (fs::is_directory(param.snapshot_prefix(), ec)) {
    param.set_snapshot_prefix(SnapshotPrefixFor(path, param.snapshot_prefix(), true));
    CORTADO_LOG_INFO("snapshot_prefix is a directory and is set to {}", param.snapshot_prefix());
  }
  return param;
}

}  // namespace cortado