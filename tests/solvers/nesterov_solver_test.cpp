// SPDX-License-Identifier: Apache-2.0
// Nesterov against its update rule written out by hand:
//   h_new = momentum * h + local_rate * g;  w -= (1 + momentum) * h_new - momentum * h
#include "tiny_problem.hpp"

namespace cortado {
namespace {

using solver_testing::ExpectFollowsReference;
using solver_testing::RuleConfig;

solver_testing::ReferenceRule NesterovRule(const RuleConfig& config) {
  auto h = std::make_shared<std::vector<double>>(6, 0.0);
  const double m = config.momentum;
  return [h, m](const std::vector<double>& g, int, double lr) {
    std::vector<double> step(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double previous = (*h)[i];
      (*h)[i] = m * previous + lr * g[i];
      step[i] = (1 + m) * (*h)[i] - m * previous;
    }
    return step;
  };
}

TEST(NesterovSolverTest, WithoutMomentumIsSgd) {
  ExpectFollowsReference("Nesterov", solver_testing::PlainConfig(), NesterovRule);
}

TEST(NesterovSolverTest, Momentum) {
  RuleConfig c;
  c.momentum = 0.9f;
  ExpectFollowsReference("Nesterov", c, NesterovRule);
}

TEST(NesterovSolverTest, WeightDecayL2) {
  RuleConfig c = solver_testing::L2Config();
  c.momentum = 0.9f;
  ExpectFollowsReference("Nesterov", c, NesterovRule);
}

TEST(NesterovSolverTest, WeightDecayL1) {
  RuleConfig c = solver_testing::L1Config();
  c.momentum = 0.9f;
  ExpectFollowsReference("Nesterov", c, NesterovRule);
}

TEST(NesterovSolverTest, IterSize) {
  RuleConfig c = solver_testing::IterSizeConfig();
  c.momentum = 0.9f;
  ExpectFollowsReference("Nesterov", c, NesterovRule);
}

TEST(NesterovSolverTest, LrMultAndDecayMult) {
  RuleConfig c = solver_testing::MultConfig();
  c.momentum = 0.9f;
  ExpectFollowsReference("Nesterov", c, NesterovRule);
}

}  // namespace
}  // namespace cortado
