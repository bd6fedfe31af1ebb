// SPDX-License-Identifier: Apache-2.0
// Adam against its update rule written out by hand (beta1 = momentum, beta2 = momentum2,
// eps = delta, t = iteration + 1):
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   w -= local_rate * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)
#include "tiny_problem.hpp"

namespace cortado {
namespace {

using solver_testing::ExpectFollowsReference;
using solver_testing::RuleConfig;

constexpr double kBeta2 = 0.999;
constexpr double kEps = 1e-8;

solver_testing::ReferenceRule AdamRule(const RuleConfig& config) {
  auto m = std::make_shared<std::vector<double>>(6, 0.0);
  auto v = std::make_shared<std::vector<double>>(6, 0.0);
  const double beta1 = config.momentum;
  return [m, v, beta1](const std::vector<double>& g, int iter, double lr) {
    const int t = iter + 1;
    const double correction = std::sqrt(1 - std::pow(kBeta2, t)) / (1 - std::pow(beta1, t));
    std::vector<double> step(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      (*m)[i] = beta1 * (*m)[i] + (1 - beta1) * g[i];
      (*v)[i] = kBeta2 * (*v)[i] + (1 - kBeta2) * g[i] * g[i];
      step[i] = lr * correction * (*m)[i] / (std::sqrt((*v)[i]) + kEps);
    }
    return step;
  };
}

RuleConfig Adam(RuleConfig c, float beta1 = 0.9f) {
  c.extra = "momentum2: 0.999 delta: 1e-8";
  c.base_lr = 0.01f;
  c.momentum = beta1;
  return c;
}

TEST(AdamSolverTest, WithoutMomentum) {
  ExpectFollowsReference("Adam", Adam(solver_testing::PlainConfig(), 0.0f), AdamRule);
}

TEST(AdamSolverTest, Momentum) {
  ExpectFollowsReference("Adam", Adam(solver_testing::PlainConfig()), AdamRule);
}

TEST(AdamSolverTest, WeightDecayL2) {
  ExpectFollowsReference("Adam", Adam(solver_testing::L2Config()), AdamRule);
}

TEST(AdamSolverTest, WeightDecayL1) {
  ExpectFollowsReference("Adam", Adam(solver_testing::L1Config()), AdamRule);
}

TEST(AdamSolverTest, IterSize) {
  ExpectFollowsReference("Adam", Adam(solver_testing::IterSizeConfig()), AdamRule);
}

TEST(AdamSolverTest, LrMultAndDecayMult) {
  ExpectFollowsReference("Adam", Adam(solver_testing::MultConfig()), AdamRule);
}

TEST(AdamSolverTest, KeepsMomentsAfterTheFirstSet) {
  Context ctx(Device::Cpu(), 1701);
  auto solver = solver_testing::MakeTinySolver("Adam", Adam(RuleConfig{}), &ctx);
  ASSERT_EQ(solver->history().size(), 2u);
  solver->Step(1);
  const std::vector<double> g = solver_testing::TinyGradient(solver_testing::TinyW0());
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(solver->history()[0]->cpu_data()[i], 0.1 * g[i], 1e-6);
    EXPECT_NEAR(solver->history()[1]->cpu_data()[i], 0.001 * g[i] * g[i], 1e-7);
  }
}

}  // namespace
}  // namespace cortado
