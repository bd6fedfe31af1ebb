// SPDX-License-Identifier: Apache-2.0
// A training problem small enough to solve by hand, for the solver tests.
//
// The net is Input(x: 2x3, t: 2x2) -> InnerProduct (2 outputs, no bias, weight W: 2x3) ->
// EuclideanLoss, so with Y = x W^T the loss is sum((Y - t)^2) / (2 * 2) and its gradient is
// dL/dW[o][k] = sum_n (Y[n][o] - t[n][o]) * x[n][k] / 2. TinyGradient computes that in double,
// independently of the layers, and ExpectFollowsReference checks a solver step by step against
// an update rule written out in the test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "io/proto_io.hpp"
#include "solvers/solver.hpp"

namespace cortado::solver_testing {

inline const std::vector<double>& TinyX() {
  static const std::vector<double> x = {0.5, -1.0, 2.0, 1.5, 0.25, -0.75};
  return x;
}
inline const std::vector<double>& TinyT() {
  static const std::vector<double> t = {1.0, -0.5, 0.3, 2.0};
  return t;
}
inline const std::vector<double>& TinyW0() {
  static const std::vector<double> w = {0.2, -0.1, 0.4, -0.3, 0.5, 0.1};
  return w;
}

// Y - t for weights w (2 samples x 2 outputs).
inline std::vector<double> TinyResidual(const std::vector<double>& w) {
  std::vector<double> r(4);
  for (int n = 0; n < 2; ++n) {
    for (int o = 0; o < 2; ++o) {
      double y = 0.0;
      for (int k = 0; k < 3; ++k) y += TinyX()[n * 3 + k] * w[o * 3 + k];
      r[n * 2 + o] = y - TinyT()[n * 2 + o];
    }
  }
  return r;
}

inline double TinyLoss(const std::vector<double>& w) {
  double sum = 0.0;
  for (double v : TinyResidual(w)) sum += v * v;
  return sum / 4.0;
}

inline std::vector<double> TinyGradient(const std::vector<double>& w) {
  const std::vector<double> r = TinyResidual(w);
  std::vector<double> g(6, 0.0);
  for (int o = 0; o < 2; ++o) {
    for (int k = 0; k < 3; ++k) {
      for (int n = 0; n < 2; ++n) g[o * 3 + k] += r[n * 2 + o] * TinyX()[n * 3 + k] / 2.0;
    }
  }
  return g;
}

inline std::string TinyNetText(float lr_mult = 1.0f, float decay_mult = 1.0f) {
  return "name: 'tiny' "
         "layer { name: 'in' type: 'Input' top: 'x' top: 't' "
         "  input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } } "
         "layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y' "
         "  param { lr_mult: " +
         std::to_string(lr_mult) + " decay_mult: " + std::to_string(decay_mult) +
         " } "
         "  inner_product_param { num_output: 2 bias_term: false "
         "    weight_filler { type: 'gaussian' std: 0.5 } } } "
         "layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' } ";
}

struct RuleConfig {
  float base_lr = 0.1f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  std::string regularization = "L2";
  int iter_size = 1;
  float lr_mult = 1.0f;
  float decay_mult = 1.0f;
  std::string extra;  // more SolverParameter text, e.g. "delta: 1e-6"
};

inline caffe::SolverParameter ParseSolver(const std::string& text) {
  caffe::SolverParameter param;
  io::ReadProtoFromTextString(text, "<test solver>", &param);
  return param;
}

inline caffe::SolverParameter TinySolverParam(const std::string& type, const RuleConfig& c) {
  caffe::SolverParameter param = ParseSolver(c.extra);
  param.set_type(type);
  param.set_base_lr(c.base_lr);
  param.set_lr_policy("fixed");
  param.set_momentum(c.momentum);
  param.set_weight_decay(c.weight_decay);
  param.set_regularization_type(c.regularization);
  param.set_iter_size(c.iter_size);
  param.set_max_iter(3);
  param.set_random_seed(1701);
  param.set_snapshot_after_train(false);
  param.set_solver_mode(caffe::SolverParameter::CPU);
  io::ReadProtoFromTextString(TinyNetText(c.lr_mult, c.decay_mult), "<tiny net>",
                              param.mutable_net_param());
  return param;
}

inline std::vector<double> TinyWeights(const Solver& solver) {
  const Tensor* w = solver.net()->learnable_params()[0];
  return std::vector<double>(w->cpu_data(), w->cpu_data() + w->count());
}

// Puts x, t and W0 into the solver's train net.
inline void LoadTinyProblem(Solver* solver) {
  Net* net = solver->net();
  std::copy(TinyX().begin(), TinyX().end(), net->blob_by_name("x")->mutable_cpu_data());
  std::copy(TinyT().begin(), TinyT().end(), net->blob_by_name("t")->mutable_cpu_data());
  std::copy(TinyW0().begin(), TinyW0().end(), net->learnable_params()[0]->mutable_cpu_data());
}

inline std::unique_ptr<Solver> MakeTinySolver(const std::string& type, const RuleConfig& c,
                                              Context* ctx) {
  auto solver = CreateSolver(TinySolverParam(type, c), ctx);
  LoadTinyProblem(solver.get());
  return solver;
}

// A reference update rule: from the regularized gradient, the iteration (0-based) and the
// local learning rate (base_lr * lr_mult), the step that is subtracted from the weights. It
// keeps its own history between calls.
using ReferenceRule = std::function<std::vector<double>(const std::vector<double>& gradient,
                                                        int iter, double local_rate)>;
using ReferenceRuleFactory = std::function<ReferenceRule(const RuleConfig&)>;

// Trains `iterations` steps and checks each step against `rule`. The reference takes the
// solver's weights before each step (so float rounding does not compound), adds the weight
// decay by hand (L2: decay * w, L1: decay * sign(w), decay = weight_decay * decay_mult) and
// expects w_after = w_before - rule(...). iter_size accumulates the same batch iter_size times
// and divides by iter_size, so the gradient is unchanged.
inline void ExpectFollowsReference(const std::string& type, const RuleConfig& config,
                                   const ReferenceRuleFactory& factory, int iterations = 3) {
  Context ctx(Device::Cpu(), 1701);
  auto solver = MakeTinySolver(type, config, &ctx);
  ReferenceRule rule = factory(config);
  const double decay = static_cast<double>(config.weight_decay) * config.decay_mult;
  const double local_rate = static_cast<double>(config.base_lr) * config.lr_mult;
  for (int iter = 0; iter < iterations; ++iter) {
    const std::vector<double> before = TinyWeights(*solver);
    std::vector<double> g = TinyGradient(before);
    for (size_t i = 0; i < g.size(); ++i) {
      if (config.regularization == "L2") {
        g[i] += decay * before[i];
      } else {
        g[i] += decay * static_cast<double>((before[i] > 0) - (before[i] < 0));
      }
    }
    const std::vector<double> step = rule(g, iter, local_rate);
    solver->Step(1);
    ASSERT_EQ(solver->iter(), iter + 1);
    const std::vector<double> after = TinyWeights(*solver);
    for (size_t i = 0; i < after.size(); ++i) {
      const double expected = before[i] - step[i];
      EXPECT_NEAR(after[i], expected, 2e-7 + 1e-4 * std::fabs(step[i]))
          << type << " iteration " << iter << " weight " << i << " (step " << step[i] << ")";
    }
  }
}

// The configurations every rule is checked in; `momentum` is the rule's momentum-like setting.
inline RuleConfig PlainConfig() { return RuleConfig{}; }
inline RuleConfig L2Config() {
  RuleConfig c;
  c.weight_decay = 0.05f;
  return c;
}
inline RuleConfig L1Config() {
  RuleConfig c;
  c.weight_decay = 0.05f;
  c.regularization = "L1";
  return c;
}
inline RuleConfig IterSizeConfig() {
  RuleConfig c;
  c.iter_size = 2;
  return c;
}
inline RuleConfig MultConfig() {
  RuleConfig c;
  c.weight_decay = 0.05f;
  c.lr_mult = 2.0f;
  c.decay_mult = 0.5f;
  return c;
}

// A fresh directory under the system temp dir, removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = std::filesystem::temp_directory_path() /
            ("cortado_solver_test_" + std::to_string(getpid()) + "_" + std::to_string(stamp) + "_" +
             std::to_string(counter()++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static int& counter() {
    static int value = 0;
    return value;
  }
  std::filesystem::path path_;
};

inline std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace cortado::solver_testing
