// SPDX-License-Identifier: Apache-2.0
// AdaDelta against its update rule written out by hand (rho = momentum):
//   G = rho * G + (1 - rho) * g^2
//   s = g * sqrt((D + delta) / (G + delta))
//   D = rho * D + (1 - rho) * s^2
//   w -= local_rate * s
#include "tiny_problem.hpp"

namespace cortado {
namespace {

using solver_testing::ExpectFollowsReference;
using solver_testing::RuleConfig;

constexpr double kDelta = 1e-4;

solver_testing::ReferenceRule AdaDeltaRule(const RuleConfig& config) {
  auto grad_sq = std::make_shared<std::vector<double>>(6, 0.0);
  auto step_sq = std::make_shared<std::vector<double>>(6, 0.0);
  const double rho = config.momentum;
  return [grad_sq, step_sq, rho](const std::vector<double>& g, int, double lr) {
    std::vector<double> step(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      (*grad_sq)[i] = rho * (*grad_sq)[i] + (1 - rho) * g[i] * g[i];
      const double s = g[i] * std::sqrt(((*step_sq)[i] + kDelta) / ((*grad_sq)[i] + kDelta));
      (*step_sq)[i] = rho * (*step_sq)[i] + (1 - rho) * s * s;
      step[i] = lr * s;
    }
    return step;
  };
}

RuleConfig Delta(RuleConfig c, float rho = 0.95f) {
  c.extra = "delta: 1e-4";
  c.base_lr = 1.0f;
  c.momentum = rho;
  return c;
}

TEST(AdaDeltaSolverTest, NoDecay) {
  ExpectFollowsReference("AdaDelta", Delta(solver_testing::PlainConfig(), 0.0f), AdaDeltaRule);
}

TEST(AdaDeltaSolverTest, Momentum) {
  ExpectFollowsReference("AdaDelta", Delta(solver_testing::PlainConfig()), AdaDeltaRule);
}

TEST(AdaDeltaSolverTest, WeightDecayL2) {
  ExpectFollowsReference("AdaDelta", Delta(solver_testing::L2Config()), AdaDeltaRule);
}

TEST(AdaDeltaSolverTest, WeightDecayL1) {
  ExpectFollowsReference("AdaDelta", Delta(solver_testing::L1Config()), AdaDeltaRule);
}

TEST(AdaDeltaSolverTest, IterSize) {
  ExpectFollowsReference("AdaDelta", Delta(solver_testing::IterSizeConfig()), AdaDeltaRule);
}

TEST(AdaDeltaSolverTest, LrMultAndDecayMult) {
  ExpectFollowsReference("AdaDelta", Delta(solver_testing::MultConfig()), AdaDeltaRule);
}

TEST(AdaDeltaSolverTest, KeepsTwoHistorySetsInCaffeOrder) {
  Context ctx(Device::Cpu(), 1701);
  auto solver = solver_testing::MakeTinySolver("AdaDelta", Delta(RuleConfig{}), &ctx);
  ASSERT_EQ(solver->history().size(), 2u);
  solver->Step(1);
  // First set: running mean of g^2 = (1 - rho) g^2; second: of the steps squared.
  const std::vector<double> g = solver_testing::TinyGradient(solver_testing::TinyW0());
  for (int i = 0; i < 6; ++i) {
    const double g2 = 0.05 * g[i] * g[i];
    const double s = g[i] * std::sqrt(kDelta / (g2 + kDelta));
    EXPECT_NEAR(solver->history()[0]->cpu_data()[i], g2, 1e-6 * (1 + g2));
    EXPECT_NEAR(solver->history()[1]->cpu_data()[i], 0.05 * s * s, 1e-6);
  }
}

}  // namespace
}  // namespace cortado
