// SPDX-License-Identifier: Apache-2.0
// Solvers on the GPU against the same solvers on the CPU: every update rule on the tiny
// problem of tests/solvers, and SGD's multi-tensor step (one launch per 96 parameters) on a net
// with more parameters than one launch holds, with per-parameter lr_mult and decay_mult,
// momentum, weight decay and iter_size.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "io/proto_io.hpp"
#include "solvers/solver.hpp"
#include "solvers/tiny_problem.hpp"
#include "support/gpu_check.hpp"

namespace cortado::testing {
namespace {

using solver_testing::RuleConfig;

void ExpectNear(const Tensor& cpu, const Tensor& gpu, const std::string& what, float tol) {
  ASSERT_EQ(cpu.count(), gpu.count()) << what;
  const float* a = cpu.cpu_data();
  const float* b = gpu.cpu_data();
  for (int i = 0; i < cpu.count(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol * std::max(1.0f, std::fabs(a[i]))) << what << " element " << i;
  }
}

struct RuleCase {
  std::string type;
  RuleConfig config;
};

std::vector<RuleCase> RuleCases() {
  std::vector<RuleCase> cases;
  for (const std::string type : {"SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam"}) {
    RuleConfig base;
    base.base_lr = type == "AdaDelta" ? 1.0f : 0.05f;
    if (type != "AdaGrad" && type != "RMSProp") base.momentum = 0.9f;
    if (type == "RMSProp") base.extra = "rms_decay: 0.9 delta: 1e-6";
    if (type == "AdaDelta") base.extra = "delta: 1e-4";
    RuleConfig l2 = base;
    l2.weight_decay = 0.05f;
    l2.lr_mult = 2.0f;
    l2.decay_mult = 0.5f;
    RuleConfig l1 = l2;
    l1.regularization = "L1";
    RuleConfig iter_size = base;
    iter_size.iter_size = 2;
    for (const RuleConfig& c : {base, l2, l1, iter_size}) cases.push_back({type, c});
  }
  return cases;
}

TEST(SolverGpuTest, EveryRuleMatchesTheCpu) {
  CORTADO_REQUIRE_GPU();
  for (const RuleCase& c : RuleCases()) {
    SCOPED_TRACE(c.type + " " + c.config.regularization + " decay " +
                 std::to_string(c.config.weight_decay) + " iter_size " +
                 std::to_string(c.config.iter_size));
    Context cpu_ctx(Device::Cpu(), 1701);
    Context gpu_ctx(Device::Cuda(0), 1701);
    auto cpu = solver_testing::MakeTinySolver(c.type, c.config, &cpu_ctx);
    auto gpu = solver_testing::MakeTinySolver(c.type, c.config, &gpu_ctx);
    cpu->Step(4);
    gpu->Step(4);
    ExpectNear(*cpu->net()->learnable_params()[0], *gpu->net()->learnable_params()[0], "weights",
               1e-5f);
    // The weights moved: the comparison is not between two untouched copies.
    EXPECT_NE(cpu->net()->learnable_params()[0]->cpu_data()[0],
              static_cast<float>(solver_testing::TinyW0()[0]));
  }
}

// Input -> InnerProduct -> 100 in-place Bias layers -> InnerProduct -> EuclideanLoss: 104
// learnable parameters of four sizes, so the multi-tensor step takes two launches.
std::string ManyParamsNet() {
  std::string net =
      "name: 'many' "
      "layer { name: 'in' type: 'Input' top: 'x' top: 't' "
      "  input_param { shape { dim: 4 dim: 8 } shape { dim: 4 dim: 3 } } } "
      "layer { name: 'ip1' type: 'InnerProduct' bottom: 'x' top: 'h' "
      "  param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 } "
      "  inner_product_param { num_output: 16 weight_filler { type: 'gaussian' std: 0.3 } "
      "    bias_filler { type: 'gaussian' std: 0.1 } } } ";
  for (int i = 0; i < 100; ++i) {
    net += "layer { name: 'b" + std::to_string(i) +
           "' type: 'Bias' bottom: 'h' top: 'h' param { lr_mult: " + std::to_string(i % 3) +
           " decay_mult: " + std::to_string(i % 2) +
           " } bias_param { filler { type: 'gaussian' std: 0.05 } } } ";
  }
  net +=
      "layer { name: 'ip2' type: 'InnerProduct' bottom: 'h' top: 'y' "
      "  inner_product_param { num_output: 3 weight_filler { type: 'gaussian' std: 0.3 } "
      "    bias_filler { type: 'constant' value: 0.2 } } } "
      "layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' } ";
  return net;
}

std::unique_ptr<Solver> ManyParamsSolver(Context* ctx, const std::string& extra) {
  caffe::SolverParameter param = solver_testing::ParseSolver(
      "base_lr: 0.02 lr_policy: 'fixed' momentum: 0.9 weight_decay: 0.01 max_iter: 10 "
      "random_seed: 5 snapshot_after_train: false " +
      extra);
  io::ReadProtoFromTextString(ManyParamsNet(), "<many params>", param.mutable_net_param());
  auto solver = CreateSolver(param, ctx);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const char* name : {"x", "t"}) {
    Tensor* blob = solver->net()->blob_by_name(name);
    for (int i = 0; i < blob->count(); ++i) blob->mutable_cpu_data()[i] = u(rng);
  }
  return solver;
}

TEST(SolverGpuTest, SgdStepOverManyParametersMatchesTheCpu) {
  CORTADO_REQUIRE_GPU();
  for (const std::string extra : {"", "iter_size: 2", "regularization_type: 'L1'"}) {
    SCOPED_TRACE("solver extra: '" + extra + "'");
    Context cpu_ctx(Device::Cpu(), 5);
    Context gpu_ctx(Device::Cuda(0), 5);
    auto cpu = ManyParamsSolver(&cpu_ctx, extra);
    auto gpu = ManyParamsSolver(&gpu_ctx, extra);
    const auto& cpu_params = cpu->net()->learnable_params();
    const auto& gpu_params = gpu->net()->learnable_params();
    ASSERT_EQ(cpu_params.size(), 104u);
    ASSERT_EQ(gpu_params.size(), cpu_params.size());
    // Same starting point on both devices, whatever the fillers drew.
    for (size_t i = 0; i < cpu_params.size(); ++i) gpu_params[i]->CopyFrom(*cpu_params[i]);
    std::vector<std::vector<float>> start;
    for (Tensor* p : cpu_params) start.emplace_back(p->cpu_data(), p->cpu_data() + p->count());

    cpu->Step(3);
    gpu->Step(3);
    int moved = 0;
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      const std::string what = "parameter " + std::to_string(i);
      ExpectNear(*cpu_params[i], *gpu_params[i], what + " data", 1e-5f);
      ExpectNear(*cpu->history()[i], *gpu->history()[i], what + " history", 1e-5f);
      // Caffe leaves the step in the diff.
      for (int k = 0; k < cpu_params[i]->count(); ++k) {
        ASSERT_NEAR(gpu_params[i]->cpu_diff()[k], gpu->history()[i]->cpu_data()[k], 0.0f) << what;
      }
      moved += cpu_params[i]->cpu_data()[0] != start[i][0];
    }
    // Parameters with lr_mult 0 stay; the others (two thirds of the Bias layers) move.
    EXPECT_GT(moved, 60);
    EXPECT_LT(moved, 104);
  }
}

}  // namespace
}  // namespace cortado::testing
