// SPDX-License-Identifier: Apache-2.0
// RMSProp against its update rule written out by hand:
//   H = rms_decay * H + (1 - rms_decay) * g^2;  w -= local_rate * g / (sqrt(H) + delta)
#include "tiny_problem.hpp"

namespace cortado {
namespace {

using solver_testing::ExpectFollowsReference;
using solver_testing::RuleConfig;

constexpr double kRmsDecay = 0.9;
constexpr double kDelta = 1e-6;

solver_testing::ReferenceRule RmsPropRule(const RuleConfig&) {
  auto mean_sq = std::make_shared<std::vector<double>>(6, 0.0);
  return [mean_sq](const std::vector<double>& g, int, double lr) {
    std::vector<double> step(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      (*mean_sq)[i] = kRmsDecay * (*mean_sq)[i] + (1 - kRmsDecay) * g[i] * g[i];
      step[i] = lr * g[i] / (std::sqrt((*mean_sq)[i]) + kDelta);
    }
    return step;
  };
}

RuleConfig Rms(RuleConfig c) {
  c.extra = "rms_decay: 0.9 delta: 1e-6";
  c.base_lr = 0.01f;
  return c;
}

TEST(RMSPropSolverTest, Plain) {
  ExpectFollowsReference("RMSProp", Rms(solver_testing::PlainConfig()), RmsPropRule);
}

TEST(RMSPropSolverTest, WeightDecayL2) {
  ExpectFollowsReference("RMSProp", Rms(solver_testing::L2Config()), RmsPropRule);
}

TEST(RMSPropSolverTest, WeightDecayL1) {
  ExpectFollowsReference("RMSProp", Rms(solver_testing::L1Config()), RmsPropRule);
}

TEST(RMSPropSolverTest, IterSize) {
  ExpectFollowsReference("RMSProp", Rms(solver_testing::IterSizeConfig()), RmsPropRule);
}

TEST(RMSPropSolverTest, LrMultAndDecayMult) {
  ExpectFollowsReference("RMSProp", Rms(solver_testing::MultConfig()), RmsPropRule);
}

TEST(RMSPropSolverTest, MomentumAndBadDecayAreRejected) {
  Context ctx(Device::Cpu(), 1701);
  RuleConfig momentum = Rms(RuleConfig{});
  momentum.momentum = 0.9f;
  RuleConfig decay;
  decay.extra = "rms_decay: 1.0";
  for (const auto& [config, word] : {std::pair{momentum, "momentum"}, {decay, "rms_decay"}}) {
    try {
      solver_testing::MakeTinySolver("RMSProp", config, &ctx);
      ADD_FAILURE() << "expected an error mentioning " << word;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cortado
