// SPDX-License-Identifier: Apache-2.0
// SGD against its update rule written out by hand (see tiny_problem.hpp for the problem):
//   h = momentum * h + local_rate * g;  w -= h
#include "tiny_problem.hpp"

namespace cortado {
namespace {

using solver_testing::ExpectFollowsReference;
using solver_testing::RuleConfig;

solver_testing::ReferenceRule SgdRule(const RuleConfig& config) {
  auto h = std::make_shared<std::vector<double>>(6, 0.0);
  const double momentum = config.momentum;
  return [h, momentum](const std::vector<double>& g, int, double lr) {
    for (size_t i = 0; i < g.size(); ++i) (*h)[i] = momentum * (*h)[i] + lr * g[i];
    return *h;
  };
}

TEST(SGDSolverTest, Plain) {
  ExpectFollowsReference("SGD", solver_testing::PlainConfig(), SgdRule);
}

TEST(SGDSolverTest, Momentum) {
  RuleConfig c;
  c.momentum = 0.9f;
  ExpectFollowsReference("SGD", c, SgdRule);
}

TEST(SGDSolverTest, WeightDecayL2) {
  RuleConfig c = solver_testing::L2Config();
  c.momentum = 0.9f;
  ExpectFollowsReference("SGD", c, SgdRule);
}

TEST(SGDSolverTest, WeightDecayL1) {
  ExpectFollowsReference("SGD", solver_testing::L1Config(), SgdRule);
}

TEST(SGDSolverTest, IterSizeAccumulatesAndNormalizes) {
  RuleConfig c = solver_testing::IterSizeConfig();
  c.momentum = 0.5f;
  ExpectFollowsReference("SGD", c, SgdRule);
}

TEST(SGDSolverTest, LrMultAndDecayMult) {
  RuleConfig c = solver_testing::MultConfig();
  c.momentum = 0.9f;
  ExpectFollowsReference("SGD", c, SgdRule);
}

TEST(SGDSolverTest, RegistersAsSGD) {
  Context ctx(Device::Cpu(), 1701);
  auto solver = solver_testing::MakeTinySolver("SGD", RuleConfig{}, &ctx);
  EXPECT_STREQ(solver->type(), "SGD");
  EXPECT_EQ(solver->history().size(), 1u);
}

}  // namespace
}  // namespace cortado
