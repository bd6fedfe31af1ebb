// SPDX-License-Identifier: Apache-2.0
// AdaGrad against its update rule written out by hand:
//   H += g^2;  w -= local_rate * g / (sqrt(H) + delta)
#include "tiny_problem.hpp"

namespace cortado {
namespace {

using solver_testing::ExpectFollowsReference;
using solver_testing::RuleConfig;

solver_testing::ReferenceRule AdaGradRule(const RuleConfig&) {
  auto sum = std::make_shared<std::vector<double>>(6, 0.0);
  const double delta = 1e-6;  // set through `extra` below
  return [sum, delta](const std::vector<double>& g, int, double lr) {
    std::vector<double> step(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      (*sum)[i] += g[i] * g[i];
      step[i] = lr * g[i] / (std::sqrt((*sum)[i]) + delta);
    }
    return step;
  };
}

RuleConfig WithDelta(RuleConfig c) {
  c.extra = "delta: 1e-6";
  return c;
}

TEST(AdaGradSolverTest, Plain) {
  ExpectFollowsReference("AdaGrad", WithDelta(solver_testing::PlainConfig()), AdaGradRule);
}

TEST(AdaGradSolverTest, WeightDecayL2) {
  ExpectFollowsReference("AdaGrad", WithDelta(solver_testing::L2Config()), AdaGradRule);
}

TEST(AdaGradSolverTest, WeightDecayL1) {
  ExpectFollowsReference("AdaGrad", WithDelta(solver_testing::L1Config()), AdaGradRule);
}

TEST(AdaGradSolverTest, IterSize) {
  ExpectFollowsReference("AdaGrad", WithDelta(solver_testing::IterSizeConfig()), AdaGradRule);
}

TEST(AdaGradSolverTest, LrMultAndDecayMult) {
  ExpectFollowsReference("AdaGrad", WithDelta(solver_testing::MultConfig()), AdaGradRule);
}

TEST(AdaGradSolverTest, MomentumIsRejected) {
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  c.momentum = 0.9f;
  try {
    solver_testing::MakeTinySolver("AdaGrad", c, &ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("momentum"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cortado
