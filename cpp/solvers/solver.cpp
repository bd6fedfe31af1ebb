// SPDX-License-Identifier: Apache-2.0
// The solver: its nets, the training loop (Step, the test passes, the display), the learning
// rate policies and the update's common parts (loss scaling, clipping, regularisation). Its
// snapshots and Restore are in solver_snapshot.cpp; the update rules in *_solver.cpp.
#include "solvers/solver.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "io/proto_io.hpp"
#include "math/math.hpp"
#include "math/on_device.hpp"

namespace cortado {
namespace {

// What a reseed is for: the test pass at the start of an iteration gets its own stream, so
// the training draws do not depend on whether (or how long) the solver tested.
constexpr int kTrainDraws = 0;
constexpr int kTestDraws = 1;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// " (* w = w*v loss)" after an output that contributes to the loss, as Caffe prints it.
std::string LossSuffix(float loss_weight, float value) {
  if (loss_weight == 0.0f) return {};
  return fmt::format(" (* {:g} = {:g} loss)", loss_weight, loss_weight * value);
}

caffe::NetParameter ReadNetFile(const std::string& what, const std::string& path) {
  return WithContext(what, [&] { return io::ReadNetParameterFromTextFile(path); });
}

}  // namespace

const std::vector<std::string>& Solver::LrPolicies() {
  static const std::vector<std::string> policies = {"fixed",     "step", "exp",    "inv",
                                                    "multistep", "poly", "sigmoid"};
  return policies;
}

Solver::Solver(const caffe::SolverParameter& param, Context* ctx, const NetOptions& net_options)
    : param_(param), ctx_(ctx), net_options_(net_options) {
  CORTADO_CHECK(ctx_ != nullptr, "a solver needs a context");
  CORTADO_LOG_INFO("Initializing solver from parameters: \n{}", param_.DebugString());
  if (param_.average_loss() < 1) {
    CORTADO_THROW(kInvalidArgument, "solver: average_loss must be at least 1, got {}",
                  param_.average_loss());
  }
  if (param_.iter_size() < 1) {
    CORTADO_THROW(kInvalidArgument, "solver: iter_size must be at least 1, got {}",
                  param_.iter_size());
  }
  const auto& policies = LrPolicies();
  if (std::find(policies.begin(), policies.end(), param_.lr_policy()) == policies.end()) {
    CORTADO_THROW(kInvalidArgument, "solver: unknown lr_policy '{}' (known: {})",
                  param_.lr_policy(), fmt::join(policies, ", "));
  }
  if (param_.regularization_type() != "L1" && param_.regularization_type() != "L2") {
    CORTADO_THROW(kInvalidArgument, "solver: unknown regularization_type '{}' (known: L1, L2)",
                  param_.regularization_type());
  }
  if (param_.snapshot() > 0 && !param_.has_snapshot_prefix()) {
    CORTADO_THROW(kInvalidArgument, "solver: snapshot is {} but snapshot_prefix is not set",
                  param_.snapshot());
  }
  if (param_.random_seed() >= 0) {
    base_seed_ = param_.random_seed();
    ctx_->Seed(param_.random_seed());
  } else {
    const auto now = std::chrono::high_resolution_clock::now().time_since_epoch().count();
    base_seed_ =
        static_cast<int64_t>(SplitMix64(static_cast<uint64_t>(now) ^ std::random_device{}()) >> 1);
  }
  // Before the nets are built: their convolutions choose algorithms for this precision.
  const auto precision = param_.precision();
  SetPrecision(*ctx_, precision);
  if (param_.loss_scale() < 0.0f || !std::isfinite(param_.loss_scale())) {
    CORTADO_THROW(kInvalidArgument, "solver: loss_scale must be 0 (automatic) or positive, got {}",
                  param_.loss_scale());
  }
  if (param_.loss_scale_window() < 0) {
    CORTADO_THROW(kInvalidArgument, "solver: loss_scale_window must be 0 or more, got {}",
                  param_.loss_scale_window());
  }
  loss_scaling_ = param_.loss_scale() > 0.0f || precision == caffe::SolverParameter::FLOAT16;
  loss_scale_ = param_.loss_scale() > 0.0f ? param_.loss_scale() : loss_scaling_ ? 65536.0f : 1.0f;
  if (loss_scaling_) {
    CORTADO_LOG_INFO("Loss scaling: starts at {:g}, {}", loss_scale_,
                     param_.loss_scale_window() > 0
                         ? fmt::format("doubled after {} finite updates in a row, halved on "
                                       "overflow",
                                       param_.loss_scale_window())
                         : std::string("fixed"));
  }
  InitTrainNet();
  InitTestNets();
  AddHistorySet();
  for (Tensor* p : net_->learnable_params()) {
    update_.push_back(std::make_shared<Tensor>(p->shape()));
    temp_.push_back(std::make_shared<Tensor>(p->shape()));
  }
  CORTADO_LOG_INFO("Solver scaffolding done.");
}

Solver::~Solver() = default;

void Solver::InitTrainNet() {
  const int num_train_nets = param_.has_net() + param_.has_net_param() + param_.has_train_net() +
                             param_.has_train_net_param();
  const char* fields = "net, net_param, train_net, train_net_param";
  if (num_train_nets < 1) {
    CORTADO_THROW(kInvalidArgument, "solver: no train net: set one of {}", fields);
  }
  if (num_train_nets > 1) {
    CORTADO_THROW(kInvalidArgument, "solver: more than one train net: set only one of {}", fields);
  }
  caffe::NetParameter net_param;
  if (param_.has_train_net_param()) {
    CORTADO_LOG_INFO("Creating training net specified in train_net_param.");
    net_param = param_.train_net_param();
  } else if (param_.has_train_net()) {
    CORTADO_LOG_INFO("Creating training net from train_net file: {}", param_.train_net());
    net_param = ReadNetFile("solver train_net", param_.train_net());
  } else if (param_.has_net_param()) {
    CORTADO_LOG_INFO("Creating training net specified in net_param.");
    net_param = param_.net_param();
  } else {
    CORTADO_LOG_INFO("Creating training net from net file: {}", param_.net());
    net_param = ReadNetFile("solver net", param_.net());
  }
  // Solver defaults, then the net's own state, then train_state (Caffe's precedence).
  caffe::NetState state;
  state.set_phase(caffe::TRAIN);
  state.MergeFrom(net_param.state());
  state.MergeFrom(param_.train_state());
  *net_param.mutable_state() = state;
  net_ = std::make_unique<Net>(net_param, ctx_, net_options_);
  // The memory plan: gradients and data that are never alive together share buffers.
  if (net_->options().share_buffers) {
    const size_t saved = net_->ShareTrainingBuffers();
    CORTADO_LOG_INFO(
        "Training net: buffers shared between blobs' gradients and data save {:.1f} MiB",
        saved / 1048576.0);
  }
}

void Solver::InitTestNets() {
  const int num_generic_nets = param_.has_net_param() + param_.has_net();
  if (num_generic_nets > 1) {
    CORTADO_THROW(kInvalidArgument, "solver: net and net_param may not both be set");
  }
  const int num_test_net_params = param_.test_net_param_size();
  const int num_test_net_files = param_.test_net_size();
  const int num_test_nets = num_test_net_params + num_test_net_files;
  if (num_generic_nets ? param_.test_iter_size() < num_test_nets
                       : param_.test_iter_size() != num_test_nets) {
    CORTADO_THROW(kInvalidArgument,
                  "solver: test_iter must be given once per test net ({} test_iter for {} test "
                  "net(s))",
                  param_.test_iter_size(), num_test_nets);
  }
  // With a generic net (net / net_param), every test_iter beyond the explicit test nets adds
  // one more test instance of that net.
  const int num_instances = param_.test_iter_size();
  if (param_.test_state_size() && param_.test_state_size() != num_instances) {
    CORTADO_THROW(kInvalidArgument,
                  "solver: test_state must be unset or given once per test net ({} for {})",
                  param_.test_state_size(), num_instances);
  }
  if (num_instances > 0 && param_.test_interval() <= 0) {
    CORTADO_THROW(kInvalidArgument,
                  "solver: {} test net(s) but test_interval is {}; set a positive test_interval",
                  num_instances, param_.test_interval());
  }
  std::vector<std::string> sources;
  std::vector<caffe::NetParameter> net_params;
  for (int i = 0; i < num_test_net_params; ++i) {
    sources.push_back("test_net_param");
    net_params.push_back(param_.test_net_param(i));
  }
  for (int i = 0; i < num_test_net_files; ++i) {
    sources.push_back("test_net file: " + param_.test_net(i));
    net_params.push_back(ReadNetFile("solver test_net", param_.test_net(i)));
  }
  const int remaining = num_instances - num_test_nets;
  for (int i = 0; i < remaining; ++i) {
    if (param_.has_net_param()) {
      sources.push_back("net_param");
      net_params.push_back(param_.net_param());
    } else {
      sources.push_back("net file: " + param_.net());
      net_params.push_back(ReadNetFile("solver net", param_.net()));
    }
  }
  for (int i = 0; i < num_instances; ++i) {
    caffe::NetState state;
    state.set_phase(caffe::TEST);
    state.MergeFrom(net_params[i].state());
    if (param_.test_state_size()) state.MergeFrom(param_.test_state(i));
    *net_params[i].mutable_state() = state;
    CORTADO_LOG_INFO("Creating test net (#{}) specified by {}", i, sources[i]);
    test_nets_.push_back(std::make_unique<Net>(net_params[i], ctx_, net_options_));
    // Test nets only run forward: a blob's data is alive from its producer to its last consumer.
    test_nets_.back()->SetForwardOnly();
    if (test_nets_.back()->options().share_buffers) test_nets_.back()->ShareDataBuffers();
  }
  test_scores_.resize(num_instances);
}

void Solver::AddHistorySet() {
  for (Tensor* p : net_->learnable_params()) {
    auto tensor = std::make_shared<Tensor>(p->shape());
    if (tensor->count() > 0) math::Set(tensor->count(), 0.0f, tensor->mutable_cpu_data());
    history_.push_back(std::move(tensor));
  }
}

std::string Solver::LearnableParamName(int param_id) const {
  // learnable_params() lists, in order, the entries of params() that own their tensor.
  int seen = 0;
  const auto& owners = net_->param_owners();
  for (size_t i = 0; i < owners.size(); ++i) {
    if (owners[i] >= 0) continue;
    if (seen++ == param_id) return net_->param_display_names()[i];
  }
  return fmt::format("#{}", param_id);
}

SolverAction Solver::RequestedAction() const {
  return action_callback_ ? action_callback_() : SolverAction::kNone;
}

void Solver::SeedIteration(int purpose) {
  const uint64_t key = (static_cast<uint64_t>(iter_) << 1) | static_cast<uint64_t>(purpose);
  const uint64_t mixed = SplitMix64(SplitMix64(static_cast<uint64_t>(base_seed_)) ^ key);
  ctx_->Seed(static_cast<int64_t>(mixed >> 1));  // non-negative: a negative seed means "clock"
}

void Solver::Solve(const std::string& resume_file) {
  CORTADO_LOG_INFO("Solving {}", net_->name());
  CORTADO_LOG_INFO("Learning Rate Policy: {}", param_.lr_policy());
  requested_early_exit_ = false;
  if (!resume_file.empty()) Restore(resume_file);
  const int start_iter = iter_;
  Step(param_.max_iter() - iter_);
  // The final snapshot, unless the loop just wrote this iteration's.
  if (param_.snapshot_after_train() && (!param_.snapshot() || iter_ % param_.snapshot() != 0)) {
    TakeSnapshot();
  }
  if (requested_early_exit_) {
    CORTADO_LOG_INFO("Optimization stopped early.");
    return;
  }
  // Caffe's closing pass: one more forward of the train net to display the loss of the final
  // weights, and a test pass if test_interval divides max_iter. Neither changes the weights.
  if (param_.display() && iter_ % param_.display() == 0) {
    SeedIteration(kTrainDraws);
    const float loss = net_->Forward();
    UpdateSmoothedLoss(loss, start_iter, param_.average_loss());
    CORTADO_LOG_INFO("Iteration {}, loss = {:g}", iter_, smoothed_loss_);
    if (on_display_) on_display_(Display{iter_, smoothed_loss_, last_rate_, 0, -1.0});
  }
  if (param_.test_interval() && iter_ % param_.test_interval() == 0) {
    SeedIteration(kTestDraws);
    TestAll();
  }
  CORTADO_LOG_INFO("Optimization Done.");
}

void Solver::Step(int iters) {
  CheckSnapshotPrefix();
  const int start_iter = iter_;
  const int stop_iter = iter_ + iters;
  const int average_loss = param_.average_loss();
  losses_.clear();
  smoothed_loss_ = 0.0f;
  last_display_time_ = NowSeconds();
  iterations_last_ = iter_;

  while (iter_ < stop_iter) {
    net_->ClearParamDiffs();
    if (param_.test_interval() && iter_ % param_.test_interval() == 0 &&
        (iter_ > 0 || param_.test_initialization())) {
      SeedIteration(kTestDraws);
      TestAll();
      if (requested_early_exit_) break;  // stop was requested while testing
    }
    SeedIteration(kTrainDraws);
    if (on_start_) on_start_();
    const bool display = param_.display() && iter_ % param_.display() == 0;
    // Accumulate gradients over iter_size batches (Net::ForwardBackward would clear them).
    float loss = 0.0f;
    for (int i = 0; i < param_.iter_size(); ++i) {
      loss += net_->Forward();
      // Only the backward pass is scaled: Forward reads the loss weights to sum the loss.
      if (loss_scaling_) ApplyLossScale(loss_scale_);
      net_->Backward();
      if (loss_scaling_) ApplyLossScale(1.0f);
    }
    loss /= static_cast<float>(param_.iter_size());
    if (on_gradients_ready_) on_gradients_ready_(&loss);
    // After the exchange, so every rank sees the same gradients and skips alike.
    const bool update = !loss_scaling_ || UnscaleGradients();
    // After the exchange: with several ranks the loss is their mean, so every rank stops alike.
    if (!std::isfinite(loss) && !NonFiniteAllowed()) {
      CORTADO_THROW(kInvalidArgument,
                    "iteration {}: the loss is {} (training diverged, or the data holds NaN or "
                    "infinite values); stopped before applying this update. Lower base_lr or "
                    "check the data; CORTADO_ALLOW_NONFINITE_LOSS=1 trains on regardless",
                    iter_, loss);
    }
    UpdateSmoothedLoss(loss, start_iter, average_loss);
    if (display) {
      const double now = NowSeconds();
      const float lapse = static_cast<float>(now - last_display_time_);
      const float per_s =
          static_cast<float>(iter_ - iterations_last_) / (lapse != 0.0f ? lapse : 1.0f);
      CORTADO_LOG_INFO("Iteration {} ({:g} iter/s, {:g}s/{} iters), loss = {:g}", iter_, per_s,
                       lapse, param_.display(), smoothed_loss_);
      // Reported after the update, with its learning rate.
      pending_display_ =
          Display{iter_, smoothed_loss_, 0.0f, iter_ - iterations_last_, now - last_display_time_};
      last_display_time_ = now;
      iterations_last_ = iter_;
      const auto& outputs = net_->output_blobs();
      int score_index = 0;
      for (size_t j = 0; j < outputs.size(); ++j) {
        const int blob_index = net_->output_blob_indices()[j];
        const std::string& name = net_->blob_names()[blob_index];
        const float loss_weight = net_->blob_loss_weights()[blob_index];
        const float* values = outputs[j]->cpu_data();
        for (int k = 0; k < outputs[j]->count(); ++k) {
          CORTADO_LOG_INFO("    Train net output #{}: {} = {:g}{}", score_index++, name, values[k],
                           LossSuffix(loss_weight, values[k]));
        }
      }
    }
    if (update) ApplyUpdate();
    if (display && on_display_) {
      pending_display_.learning_rate = last_rate_;
      on_display_(pending_display_);
    }
    // iter_ counts the updates applied so far.
    ++iter_;

    const SolverAction request = RequestedAction();
    if ((param_.snapshot() && iter_ % param_.snapshot() == 0) ||
        request == SolverAction::kSnapshot) {
      TakeSnapshot();
    }
    if (request == SolverAction::kStop) {
      requested_early_exit_ = true;
      break;
    }
  }
}

void Solver::UpdateSmoothedLoss(float loss, int start_iter, int average_loss) {
  // The mean of the last average_loss losses, kept as a ring buffer (Caffe's formula).
  if (static_cast<int>(losses_.size()) < average_loss) {
    losses_.push_back(loss);
    const int size = static_cast<int>(losses_.size());
    smoothed_loss_ = (smoothed_loss_ * static_cast<float>(size - 1) + loss) / size;
  } else {
    const int idx = (iter_ - start_iter) % average_loss;
    smoothed_loss_ += (loss - losses_[idx]) / average_loss;
    losses_[idx] = loss;
  }
}

void Solver::TestAll() {
  for (size_t id = 0; id < test_nets_.size() && !requested_early_exit_; ++id) {
    Test(static_cast<int>(id));
  }
  if (on_test_ && !requested_early_exit_ && !test_nets_.empty()) on_test_(iter_);
}

std::vector<std::string> Solver::TestOutputNames() const {
  // The order of Test's scores: output blobs in order, each element in order.
  std::vector<std::string> names;
  for (size_t i = 0; i < test_nets_.size(); ++i) {
    const Net& net = *test_nets_[i];
    for (size_t j = 0; j < net.output_blobs().size(); ++j) {
      const std::string& blob = net.blob_names()[net.output_blob_indices()[j]];
      const int count = net.output_blobs()[j]->count();
      for (int k = 0; k < count; ++k) {
        names.push_back(count == 1 ? fmt::format("{}/{}", i, blob)
                                   : fmt::format("{}/{}[{}]", i, blob, k));
      }
    }
  }
  return names;
}

std::vector<float> Solver::TestScores() const {
  std::vector<float> values;
  for (const auto& scores : test_scores_) values.insert(values.end(), scores.begin(), scores.end());
  return values;
}

void Solver::Test(int test_net_id) {
  CORTADO_LOG_INFO("Iteration {}, Testing net (#{})", iter_, test_net_id);
  Net* test_net = test_nets_[test_net_id].get();
  test_net->ShareTrainedLayersWith(*net_);
  const int test_iter = param_.test_iter(test_net_id);
  std::vector<float> scores;
  std::vector<int> score_output;
  float loss = 0.0f;
  for (int i = 0; i < test_iter; ++i) {
    const SolverAction request = RequestedAction();
    if (request == SolverAction::kSnapshot) TakeSnapshot();
    if (request == SolverAction::kStop) {
      requested_early_exit_ = true;
      break;
    }
    const float iter_loss = test_net->Forward();
    if (param_.test_compute_loss()) loss += iter_loss;
    int idx = 0;
    const auto& outputs = test_net->output_blobs();
    for (size_t j = 0; j < outputs.size(); ++j) {
      const float* values = outputs[j]->cpu_data();
      for (int k = 0; k < outputs[j]->count(); ++k, ++idx) {
        if (i == 0) {
          scores.push_back(values[k]);
          score_output.push_back(static_cast<int>(j));
        } else {
          scores[idx] += values[k];
        }
      }
    }
  }
  if (requested_early_exit_) {
    CORTADO_LOG_INFO("Test interrupted.");
    return;
  }
  if (param_.test_compute_loss()) {
    loss /= static_cast<float>(test_iter);
    CORTADO_LOG_INFO("Test loss: {:g}", loss);
  }
  auto& means = test_scores_[test_net_id];
  means.clear();
  for (size_t i = 0; i < scores.size(); ++i) {
    const int blob_index = test_net->output_blob_indices()[score_output[i]];
    const std::string& name = test_net->blob_names()[blob_index];
    const float loss_weight = test_net->blob_loss_weights()[blob_index];
    const float mean = scores[i] / static_cast<float>(test_iter);
    means.push_back(mean);
    CORTADO_LOG_INFO("    Test net output #{}: {} = {:g}{}", i, name, mean,
                     LossSuffix(loss_weight, mean));
  }
}

float Solver::GetLearningRate() {
  // The float/double mix follows Caffe's SGDSolver<float>::GetLearningRate, so rates agree to
  // the last bit: pow(float, int) is computed in double, pow(float, float) in float.
  const std::string& policy = param_.lr_policy();
  const float base_lr = param_.base_lr();
  const float gamma = param_.gamma();
  auto require = [&](bool ok, const char* what) {
    if (!ok) {
      CORTADO_THROW(kInvalidArgument, "solver: lr_policy '{}' needs {} (gamma {}, stepsize {})",
                    policy, what, gamma, param_.stepsize());
    }
  };
  if (policy == "fixed") return base_lr;
  if (policy == "step") {
    require(param_.stepsize() > 0, "stepsize > 0");
    require(gamma >= 0, "gamma >= 0");
    current_step_ = iter_ / param_.stepsize();
    return static_cast<float>(base_lr * std::pow(static_cast<double>(gamma), current_step_));
  }
  if (policy == "exp") {
    require(gamma >= 0, "gamma >= 0");
    return static_cast<float>(base_lr * std::pow(static_cast<double>(gamma), iter_));
  }
  if (policy == "inv") {
    require(gamma >= 0, "gamma >= 0");
    return base_lr * std::pow(1.0f + gamma * static_cast<float>(iter_), -param_.power());
  }
  if (policy == "multistep") {
    if (current_step_ < param_.stepvalue_size() && iter_ >= param_.stepvalue(current_step_)) {
      ++current_step_;
      CORTADO_LOG_INFO("MultiStep Status: Iteration {}, step = {}", iter_, current_step_);
    }
    require(gamma >= 0, "gamma >= 0");
    return static_cast<float>(base_lr * std::pow(static_cast<double>(gamma), current_step_));
  }
  if (policy == "poly") {
    const float progress = static_cast<float>(iter_) / static_cast<float>(param_.max_iter());
    return base_lr * std::pow(1.0f - progress, param_.power());
  }
  if (policy == "sigmoid") {
    require(gamma >= 0, "gamma >= 0");
    require(param_.stepsize() > 0, "stepsize > 0");
    const float x = static_cast<float>(iter_) - static_cast<float>(param_.stepsize());
    return base_lr * (1.0f / (1.0f + std::exp(-gamma * x)));
  }
  CORTADO_THROW(kInvalidArgument, "solver: unknown lr_policy '{}' (known: {})", policy,
                fmt::join(LrPolicies(), ", "));
}

void Solver::ApplyUpdate() {
  const float rate = GetLearningRate();
  last_rate_ = rate;
  if (param_.display() && iter_ % param_.display() == 0) {
    CORTADO_LOG_INFO("Iteration {}, lr = {:g}", iter_, rate);
  }
  ClipGradients();
  if (ApplyFusedUpdate(rate)) return;
  const int num_params = static_cast<int>(net_->learnable_params().size());
  for (int id = 0; id < num_params; ++id) {
    Normalize(id);
    Regularize(id);
    ComputeUpdateValue(id, rate);
  }
  net_->Update();
}

void Solver::ApplyLossScale(float scale) {
  if (applied_loss_scale_ == scale) return;
  const auto& blobs = net_->blobs();
  const auto& weights = net_->blob_loss_weights();
  for (size_t i = 0; i < blobs.size() && i < weights.size(); ++i) {
    if (weights[i] == 0.0f) continue;
    Tensor* t = blobs[i].get();
    float* diff = t->mutable_cpu_diff();
    std::fill(diff, diff + t->count(), weights[i] * scale);
  }
  applied_loss_scale_ = scale;
}

bool Solver::UnscaleGradients() {
  const int n = static_cast<int>(net_->flat_diff_count());
  bool finite = true;
  if (n > 0) {
    const bool gpu = math::dev::OnGpu(*ctx_);
    float* diff = gpu ? net_->mutable_flat_gpu_diff() : net_->mutable_flat_cpu_diff();
    finite = math::dev::AllFinite(*ctx_, n, diff);
    if (finite && loss_scale_ != 1.0f) math::dev::Scale(*ctx_, n, 1.0f / loss_scale_, diff);
  }
  const int window = param_.loss_scale_window();
  if (!finite) {
    ++skipped_updates_;
    loss_scale_good_steps_ = 0;
    const float old_scale = loss_scale_;
    if (window > 0) loss_scale_ = std::max(loss_scale_ * 0.5f, 1.0f / 65536.0f);
    CORTADO_LOG_INFO(
        "Iteration {}: the gradients are not finite at loss scale {:g}; skipped this update "
        "({} skipped so far), loss scale now {:g}",
        iter_, old_scale, skipped_updates_, loss_scale_);
    if (old_scale <= 1.0f / 65536.0f && !NonFiniteAllowed()) {
      CORTADO_THROW(kInvalidArgument,
                    "iteration {}: the gradients are not finite even at loss scale {:g} (training "
                    "diverged, or the data holds NaN or infinite values). Lower base_lr or check "
                    "the data",
                    iter_, old_scale);
    }
    return false;
  }
  if (window > 0 && ++loss_scale_good_steps_ >= window) {
    loss_scale_good_steps_ = 0;
    if (loss_scale_ * 2.0f <= 1e30f) loss_scale_ *= 2.0f;
  }
  return true;
}

void Solver::ClipGradients() {
  const float clip = param_.clip_gradients();
  if (clip < 0) return;
  float sumsq = 0.0f;
  for (Tensor* p : net_->learnable_params()) {
    sumsq += math::dev::Sumsq(*ctx_, p->count(), math::dev::Diff(*ctx_, *p));
  }
  const float l2norm = std::sqrt(sumsq);
  if (l2norm > clip) {
    const float scale = clip / l2norm;
    CORTADO_LOG_INFO(
        "Gradient clipping: scaling down gradients (L2 norm {:g} > {:g}) by scale factor {:g}",
        l2norm, clip, scale);
    for (Tensor* p : net_->learnable_params()) {
      math::dev::Scale(*ctx_, p->count(), scale, math::dev::MutableDiff(*ctx_, *p));
    }
  }
}

void Solver::Normalize(int param_id) {
  if (param_.iter_size() == 1) return;
  // The diffs hold the sum over iter_size batches; make them the mean.
  Tensor* p = net_->learnable_params()[param_id];
  math::dev::Scale(*ctx_, p->count(), 1.0f / static_cast<float>(param_.iter_size()),
                   math::dev::MutableDiff(*ctx_, *p));
}

void Solver::Regularize(int param_id) {
  Tensor* p = net_->learnable_params()[param_id];
  const float local_decay = param_.weight_decay() * net_->params_weight_decay()[param_id];
  if (local_decay == 0.0f || p->count() == 0) return;
  if (param_.regularization_type() == "L2") {
    math::dev::Axpy(*ctx_, p->count(), local_decay, math::dev::Data(*ctx_, *p),
                    math::dev::MutableDiff(*ctx_, *p));
  } else {  // L1 (the constructor rejected anything else)
    float* sign = math::dev::MutableData(*ctx_, *temp_[param_id]);
    math::dev::Sign(*ctx_, p->count(), math::dev::Data(*ctx_, *p), sign);
    math::dev::Axpy(*ctx_, p->count(), local_decay, sign, math::dev::MutableDiff(*ctx_, *p));
  }
}

void SetPrecision(Context& ctx, caffe::SolverParameter::Precision precision) {
  const bool half =
      precision == caffe::SolverParameter::FLOAT16 || precision == caffe::SolverParameter::BFLOAT16;
  ctx.set_allow_tf32(precision == caffe::SolverParameter::TF32 || half);
  ctx.set_half_compute(precision == caffe::SolverParameter::FLOAT16 ? Context::HalfType::kFloat16
                       : precision == caffe::SolverParameter::BFLOAT16
                           ? Context::HalfType::kBFloat16
                           : Context::HalfType::kNone);
  if (precision == caffe::SolverParameter::FLOAT32) return;
  const std::string name = caffe::SolverParameter::Precision_Name(precision);
  if (!ctx.device().is_cuda()) {
    CORTADO_LOG_INFO("Precision: {} changes nothing on the CPU, which computes in float32", name);
  } else if (half) {
    CORTADO_LOG_INFO(
        "Precision: {} (convolutions and inner products on {}'s tensor cores with float32 sums; "
        "other layers, weights and gradients float32)",
        name, ctx.device().ToString());
  } else {
    CORTADO_LOG_INFO("Precision: TF32 (convolutions and matrix products on {}'s tensor cores)",
                     ctx.device().ToString());
  }
}

std::unique_ptr<Solver> CreateSolver(const caffe::SolverParameter& param, Context* ctx,
                                     const NetOptions& net_options) {
  return SolverRegistry::Get().Create(param.type(), "solver type", param, ctx, net_options);
}

void ClearTestNets(caffe::SolverParameter* param) {
  param->set_test_interval(0);
  param->clear_test_iter();
  param->clear_test_net();
  param->clear_test_net_param();
  param->clear_test_state();
}

}  // namespace cortado
