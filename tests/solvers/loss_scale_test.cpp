// SPDX-License-Identifier: Apache-2.0
// Loss scaling (SolverParameter.loss_scale, loss_scale_window; on by default under
// `precision: FLOAT16`): an update whose gradients are not finite is skipped and the scale
// halved, finite ones in a row double it, and since the scales are powers of two a scaled run
// follows the unscaled one bit for bit. On the CPU, which computes in float32, the overflow is
// provoked with a scale near float32's largest value.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "solvers/solver.hpp"
#include "tiny_problem.hpp"

namespace cortado {
namespace {

using solver_testing::LoadTinyProblem;
using solver_testing::RuleConfig;
using solver_testing::TinySolverParam;
using solver_testing::TinyWeights;

// The tiny problem with target t[1][1] = 3.6, so that the largest gradient, dL/dW[1][0], is
// -2.99 at W0: times 2^127 it overflows float32 (whose largest value is just under 2^128),
// times 2^126 it does not, and neither do the intermediate values (dL/dY at most 2 in size).
std::unique_ptr<Solver> OverflowingSolver(Context* ctx, float loss_scale, int window) {
  RuleConfig c;
  c.momentum = 0.9f;
  caffe::SolverParameter param = TinySolverParam("SGD", c);
  if (loss_scale > 0.0f) param.set_loss_scale(loss_scale);
  param.set_loss_scale_window(window);
  auto solver = CreateSolver(param, ctx);
  LoadTinyProblem(solver.get());
  solver->net()->blob_by_name("t")->mutable_cpu_data()[3] = 3.6f;
  return solver;
}

TEST(LossScaleTest, AnOverflowSkipsTheUpdateAndHalvesTheScale) {
  Context plain_ctx(Device::Cpu(), 1701), scaled_ctx(Device::Cpu(), 1701);
  auto plain = OverflowingSolver(&plain_ctx, 0.0f, 1000);
  auto scaled = OverflowingSolver(&scaled_ctx, std::ldexp(1.0f, 127), 1000);
  EXPECT_EQ(plain->loss_scale(), 1.0f);
  EXPECT_EQ(scaled->loss_scale(), std::ldexp(1.0f, 127));
  const std::vector<double> w0 = TinyWeights(*scaled);

  scaled->Step(1);
  EXPECT_EQ(scaled->skipped_updates(), 1);
  EXPECT_EQ(scaled->loss_scale(), std::ldexp(1.0f, 126));
  EXPECT_EQ(scaled->iter(), 1) << "a skipped update still counts as an iteration";
  EXPECT_EQ(TinyWeights(*scaled), w0) << "the weights are untouched";

  // From here the scaled run makes the unscaled run's updates, bit for bit: scaling by a power
  // of two and back is exact, and the skipped step left the momentum alone.
  plain->Step(3);
  scaled->Step(3);
  EXPECT_EQ(plain->skipped_updates(), 0);
  EXPECT_EQ(scaled->skipped_updates(), 1);
  EXPECT_NE(TinyWeights(*plain), w0);
  EXPECT_EQ(TinyWeights(*scaled), TinyWeights(*plain));
  EXPECT_EQ(scaled->history()[0]->cpu_data()[0], plain->history()[0]->cpu_data()[0]);
}

TEST(LossScaleTest, FiniteUpdatesInARowDoubleTheScale) {
  Context plain_ctx(Device::Cpu(), 1701), scaled_ctx(Device::Cpu(), 1701);
  auto plain = OverflowingSolver(&plain_ctx, 0.0f, 2);
  auto scaled = OverflowingSolver(&scaled_ctx, 4.0f, 2);
  scaled->Step(1);
  EXPECT_EQ(scaled->loss_scale(), 4.0f);
  scaled->Step(1);
  EXPECT_EQ(scaled->loss_scale(), 8.0f);
  scaled->Step(3);
  EXPECT_EQ(scaled->loss_scale(), 16.0f);
  plain->Step(5);
  EXPECT_EQ(scaled->skipped_updates(), 0);
  EXPECT_EQ(TinyWeights(*scaled), TinyWeights(*plain));
}

TEST(LossScaleTest, AWindowOfZeroKeepsTheScaleButStillSkips) {
  Context ctx(Device::Cpu(), 1701);
  auto solver = OverflowingSolver(&ctx, std::ldexp(1.0f, 127), 0);
  const std::vector<double> w0 = TinyWeights(*solver);
  solver->Step(2);
  EXPECT_EQ(solver->skipped_updates(), 2);
  EXPECT_EQ(solver->loss_scale(), std::ldexp(1.0f, 127));
  EXPECT_EQ(TinyWeights(*solver), w0);
}

TEST(LossScaleTest, Float16TurnsDynamicScalingOnAndOtherPrecisionsDoNot) {
  for (auto precision : {caffe::SolverParameter::FLOAT32, caffe::SolverParameter::TF32,
                         caffe::SolverParameter::FLOAT16, caffe::SolverParameter::BFLOAT16}) {
    SCOPED_TRACE(caffe::SolverParameter::Precision_Name(precision));
    caffe::SolverParameter param = TinySolverParam("SGD", RuleConfig{});
    param.set_precision(precision);
    Context ctx(Device::Cpu(), 1701);
    auto solver = CreateSolver(param, &ctx);
    EXPECT_EQ(solver->loss_scale(), precision == caffe::SolverParameter::FLOAT16 ? 65536.0f : 1.0f);
    // The CPU computes in float32 whatever the setting.
    EXPECT_EQ(ctx.half_compute(),
              precision == caffe::SolverParameter::FLOAT16    ? Context::HalfType::kFloat16
              : precision == caffe::SolverParameter::BFLOAT16 ? Context::HalfType::kBFloat16
                                                              : Context::HalfType::kNone);
  }
}

TEST(LossScaleTest, TheSnapshotKeepsTheScaleForAResumedRun) {
  Context ctx(Device::Cpu(), 1701);
  auto solver = OverflowingSolver(&ctx, std::ldexp(1.0f, 127), 1000);
  solver->Step(2);
  const caffe::SolverState state = solver->StateProto("w.caffemodel");
  EXPECT_EQ(state.loss_scale(), std::ldexp(1.0f, 126));
  EXPECT_EQ(state.loss_scale_good_steps(), 1);

  Context resumed_ctx(Device::Cpu(), 1701);
  auto resumed = OverflowingSolver(&resumed_ctx, std::ldexp(1.0f, 127), 1000);
  resumed->Restore(state, solver->ModelProto(), "<state>", "<model>");
  EXPECT_EQ(resumed->loss_scale(), std::ldexp(1.0f, 126));
  EXPECT_EQ(resumed->iter(), 2);
  // No overflow now: it goes on as the first run does.
  solver->Step(1);
  resumed->Step(1);
  EXPECT_EQ(resumed->skipped_updates(), 0);
  EXPECT_EQ(TinyWeights(*resumed), TinyWeights(*solver));
}

TEST(LossScaleTest, BadSettingsAreNamed) {
  for (const std::string& extra :
       {std::string("loss_scale: -1"), std::string("loss_scale_window: -3")}) {
    SCOPED_TRACE(extra);
    RuleConfig c;
    c.extra = extra;
    Context ctx(Device::Cpu(), 1701);
    try {
      CreateSolver(TinySolverParam("SGD", c), &ctx);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(extra.substr(0, extra.find(':'))), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace cortado
