// SPDX-License-Identifier: Apache-2.0
// The training loop shared by every update rule: learning-rate policies against their
// formulas, gradient clipping, loss smoothing, test passes, hooks and the action callback,
// per-iteration seeding, and the errors for inconsistent solver parameters.
#include "solvers/solver.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "tiny_problem.hpp"

namespace cortado {
namespace {

using solver_testing::MakeTinySolver;
using solver_testing::RuleConfig;
using solver_testing::TinySolverParam;

// A solver whose rule does nothing, so a test can set the iteration and read the learning rate.
class ProbeSolver final : public Solver {
 public:
  ProbeSolver(const caffe::SolverParameter& param, Context* ctx) : Solver(param, ctx) {}
  const char* type() const override { return "Probe"; }
  void set_iter(int iter) { iter_ = iter; }

 protected:
  void ComputeUpdateValue(int, float) override {}
};

caffe::SolverParameter PolicyParam(const std::string& text) {
  caffe::SolverParameter param = TinySolverParam("SGD", RuleConfig{});
  caffe::SolverParameter extra = solver_testing::ParseSolver(text);
  param.MergeFrom(extra);
  return param;
}

// Learning rates of `policy` at iterations 0..last, each computed in order (multistep's
// current_step advances as the iterations pass, as in training).
std::vector<float> Rates(const caffe::SolverParameter& param, int last) {
  Context ctx(Device::Cpu(), 1701);
  ProbeSolver solver(param, &ctx);
  std::vector<float> rates;
  for (int iter = 0; iter <= last; ++iter) {
    solver.set_iter(iter);
    rates.push_back(solver.GetLearningRate());
  }
  return rates;
}

TEST(LrPolicyTest, Fixed) {
  auto rates = Rates(PolicyParam("lr_policy: 'fixed' base_lr: 0.01"), 5);
  for (float r : rates) EXPECT_FLOAT_EQ(r, 0.01f);
}

TEST(LrPolicyTest, Step) {
  // base_lr * gamma ^ floor(iter / stepsize)
  auto rates = Rates(PolicyParam("lr_policy: 'step' base_lr: 0.1 gamma: 0.5 stepsize: 3"), 7);
  for (int iter = 0; iter <= 7; ++iter) {
    EXPECT_FLOAT_EQ(rates[iter], 0.1f * std::pow(0.5f, iter / 3)) << "iter " << iter;
  }
}

TEST(LrPolicyTest, Exp) {
  auto rates = Rates(PolicyParam("lr_policy: 'exp' base_lr: 0.1 gamma: 0.9"), 5);
  for (int iter = 0; iter <= 5; ++iter) {
    EXPECT_FLOAT_EQ(rates[iter], static_cast<float>(0.1 * std::pow(0.9, iter)));
  }
}

TEST(LrPolicyTest, Inv) {
  // base_lr * (1 + gamma * iter) ^ -power
  auto rates = Rates(PolicyParam("lr_policy: 'inv' base_lr: 0.01 gamma: 0.1 power: 0.75"), 5);
  for (int iter = 0; iter <= 5; ++iter) {
    EXPECT_FLOAT_EQ(rates[iter], static_cast<float>(0.01 * std::pow(1 + 0.1 * iter, -0.75)));
  }
}

TEST(LrPolicyTest, Multistep) {
  auto param = PolicyParam(
      "lr_policy: 'multistep' base_lr: 1 gamma: 0.1 stepvalue: 2 stepvalue: 5 stepvalue: 6");
  auto rates = Rates(param, 7);
  const std::vector<float> expected = {1, 1, 0.1f, 0.1f, 0.1f, 0.01f, 0.001f, 0.001f};
  for (int iter = 0; iter <= 7; ++iter) {
    EXPECT_NEAR(rates[iter], expected[iter], 1e-7) << "iter " << iter;
  }
}

TEST(LrPolicyTest, MultistepCurrentStepIsKept) {
  Context ctx(Device::Cpu(), 1701);
  ProbeSolver solver(
      PolicyParam("lr_policy: 'multistep' base_lr: 1 gamma: 0.5 stepvalue: 1 stepvalue: 2"), &ctx);
  solver.Step(3);
  EXPECT_EQ(solver.current_step(), 2);
}

TEST(LrPolicyTest, Poly) {
  // base_lr * (1 - iter / max_iter) ^ power
  auto rates = Rates(PolicyParam("lr_policy: 'poly' base_lr: 0.1 power: 2 max_iter: 10"), 10);
  for (int iter = 0; iter <= 10; ++iter) {
    EXPECT_NEAR(rates[iter], 0.1 * std::pow(1 - iter / 10.0, 2), 1e-7) << "iter " << iter;
  }
}

TEST(LrPolicyTest, Sigmoid) {
  // base_lr / (1 + exp(-gamma * (iter - stepsize)))
  auto rates = Rates(PolicyParam("lr_policy: 'sigmoid' base_lr: 0.1 gamma: 0.5 stepsize: 4"), 8);
  for (int iter = 0; iter <= 8; ++iter) {
    EXPECT_NEAR(rates[iter], 0.1 / (1 + std::exp(-0.5 * (iter - 4))), 1e-7) << "iter " << iter;
  }
}

TEST(LrPolicyTest, UnknownPolicyNamesItAndTheKnownOnes) {
  Context ctx(Device::Cpu(), 1701);
  try {
    CreateSolver(PolicyParam("lr_policy: 'cosine'"), &ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    for (const char* word :
         {"'cosine'", "fixed", "step", "exp", "inv", "multistep", "poly", "sigmoid"}) {
      EXPECT_NE(what.find(word), std::string::npos) << word << " missing from: " << what;
    }
  }
}

TEST(LrPolicyTest, StepWithoutStepsizeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto solver = CreateSolver(PolicyParam("lr_policy: 'step' gamma: 0.1"), &ctx);
  EXPECT_THROW(solver->Step(1), Error);
}

TEST(SolverLoopTest, ClipGradientsScalesToTheNorm) {
  // SGD without momentum: the step is lr * g * clip / |g| when |g| > clip.
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  c.extra = "clip_gradients: 0.1";
  auto solver = MakeTinySolver("SGD", c, &ctx);
  const std::vector<double> g = solver_testing::TinyGradient(solver_testing::TinyW0());
  double norm = 0;
  for (double v : g) norm += v * v;
  norm = std::sqrt(norm);
  ASSERT_GT(norm, 0.1);  // so clipping happens
  solver->Step(1);
  const auto w = solver_testing::TinyWeights(*solver);
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(w[i], solver_testing::TinyW0()[i] - 0.1 * g[i] * 0.1 / norm, 1e-6) << i;
  }
}

TEST(SolverLoopTest, ClipGradientsLeavesSmallGradients) {
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  c.extra = "clip_gradients: 100";
  auto solver = MakeTinySolver("SGD", c, &ctx);
  const std::vector<double> g = solver_testing::TinyGradient(solver_testing::TinyW0());
  solver->Step(1);
  const auto w = solver_testing::TinyWeights(*solver);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(w[i], solver_testing::TinyW0()[i] - 0.1 * g[i], 1e-6) << i;
}

TEST(SolverLoopTest, AverageLossSmoothsOverTheLastIterations) {
  // Plain SGD, lr 0.1: w_{i+1} = w_i - 0.1 g(w_i). With average_loss 2, after 4 iterations
  // the smoothed loss is the mean of the losses at w_2 and w_3; after 1, the loss at w_0.
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  c.extra = "average_loss: 2";
  auto solver = MakeTinySolver("SGD", c, &ctx);
  std::vector<std::vector<double>> w = {solver_testing::TinyW0()};
  for (int i = 0; i < 4; ++i) {
    std::vector<double> next = w.back();
    const auto g = solver_testing::TinyGradient(next);
    for (int k = 0; k < 6; ++k) next[k] -= 0.1 * g[k];
    w.push_back(next);
  }
  solver->Step(1);
  EXPECT_NEAR(solver->smoothed_loss(), solver_testing::TinyLoss(w[0]), 1e-5);
  solver->Step(4);  // a new Step call restarts the smoothing, as in Caffe
  const double expected = (solver_testing::TinyLoss(w[3]) + solver_testing::TinyLoss(w[4])) / 2;
  EXPECT_NEAR(solver->smoothed_loss(), expected, 1e-5);
}

TEST(SolverLoopTest, AverageLossMustBePositive) {
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  c.extra = "average_loss: 0";
  EXPECT_THROW(MakeTinySolver("SGD", c, &ctx), Error);
}

TEST(SolverLoopTest, TestNetsShareWeightsAndAverageOverTestIter) {
  // A test net identical to the train net (net_param + one test_iter), with its own inputs.
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  c.extra = "test_iter: 3 test_interval: 2";
  auto solver = MakeTinySolver("SGD", c, &ctx);
  ASSERT_EQ(solver->test_nets().size(), 1u);
  Net* test_net = solver->test_nets()[0].get();
  EXPECT_EQ(test_net->phase(), caffe::TEST);
  std::copy(solver_testing::TinyX().begin(), solver_testing::TinyX().end(),
            test_net->blob_by_name("x")->mutable_cpu_data());
  std::copy(solver_testing::TinyT().begin(), solver_testing::TinyT().end(),
            test_net->blob_by_name("t")->mutable_cpu_data());
  solver->TestAll();
  ASSERT_EQ(solver->test_scores()[0].size(), 1u);
  EXPECT_NEAR(solver->test_scores()[0][0], solver_testing::TinyLoss(solver_testing::TinyW0()),
              1e-6);
  // Step(2) tests at iteration 0 (test_initialization) only; the test after two updates sees
  // the new weights because the nets share them.
  solver->Step(2);
  solver->TestAll();
  EXPECT_NEAR(solver->test_scores()[0][0],
              solver_testing::TinyLoss(solver_testing::TinyWeights(*solver)), 1e-6);
}

TEST(SolverLoopTest, TestIterCountMustMatchTestNets) {
  Context ctx(Device::Cpu(), 1701);
  caffe::SolverParameter param = TinySolverParam("SGD", RuleConfig{});
  *param.add_test_net_param() = param.net_param();
  param.set_test_interval(1);
  try {
    CreateSolver(param, &ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test_iter"), std::string::npos) << e.what();
  }
}

TEST(SolverLoopTest, NeedsExactlyOneTrainNet) {
  Context ctx(Device::Cpu(), 1701);
  caffe::SolverParameter none = TinySolverParam("SGD", RuleConfig{});
  none.clear_net_param();
  EXPECT_THROW(CreateSolver(none, &ctx), Error);
  caffe::SolverParameter two = TinySolverParam("SGD", RuleConfig{});
  *two.mutable_train_net_param() = two.net_param();
  EXPECT_THROW(CreateSolver(two, &ctx), Error);
}

TEST(SolverLoopTest, MissingNetFileIsNamed) {
  Context ctx(Device::Cpu(), 1701);
  caffe::SolverParameter param = TinySolverParam("SGD", RuleConfig{});
  param.clear_net_param();
  param.set_net("no/such/dir/train_val.prototxt");
  try {
    CreateSolver(param, &ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("no/such/dir/train_val.prototxt"), std::string::npos)
        << e.what();
  }
}

TEST(SolverLoopTest, NetFileAndTrainStateAreUsed) {
  // `net:` is read relative to the current directory (here: an absolute path), and
  // train_state's stage picks the layers of the train net.
  solver_testing::TempDir dir;
  const std::string net_text =
      solver_testing::TinyNetText() +
      "layer { name: 'extra' type: 'Silence' bottom: 'y' include { stage: 'debug' } }";
  std::ofstream(dir / "net.prototxt") << net_text;
  caffe::SolverParameter param = TinySolverParam("SGD", RuleConfig{});
  param.clear_net_param();
  param.set_net(dir / "net.prototxt");
  param.mutable_train_state()->add_stage("debug");
  Context ctx(Device::Cpu(), 1701);
  auto solver = CreateSolver(param, &ctx);
  EXPECT_TRUE(solver->net()->has_layer("extra"));
  EXPECT_EQ(solver->net()->phase(), caffe::TRAIN);
}

TEST(SolverLoopTest, UnknownSolverTypeListsTheKnownOnes) {
  Context ctx(Device::Cpu(), 1701);
  try {
    CreateSolver(TinySolverParam("Lion", RuleConfig{}), &ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    for (const char* word :
         {"'Lion'", "SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam"}) {
      EXPECT_NE(what.find(word), std::string::npos) << word << " missing from: " << what;
    }
  }
}

TEST(SolverLoopTest, UnknownRegularizationIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  c.regularization = "L3";
  EXPECT_THROW(MakeTinySolver("SGD", c, &ctx), Error);
}

TEST(SolverLoopTest, HooksRunInOrderEveryIteration) {
  Context ctx(Device::Cpu(), 1701);
  auto solver = MakeTinySolver("SGD", RuleConfig{}, &ctx);
  std::string calls;
  solver->set_on_start([&] { calls += 's'; });
  solver->set_on_gradients_ready([&](float* /*loss*/) {
    // The gradients are there and the weights not yet updated.
    const Tensor* w = solver->net()->learnable_params()[0];
    EXPECT_NE(w->cpu_diff()[0], 0.0f);
    EXPECT_FLOAT_EQ(w->cpu_data()[0], static_cast<float>(solver_testing::TinyWeights(*solver)[0]));
    calls += 'g';
  });
  solver->Step(2);
  EXPECT_EQ(calls, "sgsg");
}

TEST(SolverLoopTest, GradientHookCanReplaceTheGradient) {
  // What the data-parallel trainer does: overwrite the diffs before the update.
  Context ctx(Device::Cpu(), 1701);
  auto solver = MakeTinySolver("SGD", RuleConfig{}, &ctx);
  solver->set_on_gradients_ready([&](float* /*loss*/) {
    Tensor* w = solver->net()->learnable_params()[0];
    for (int i = 0; i < w->count(); ++i) w->mutable_cpu_diff()[i] = 1.0f;
  });
  solver->Step(1);
  const auto w = solver_testing::TinyWeights(*solver);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(w[i], solver_testing::TinyW0()[i] - 0.1, 1e-6);
}

TEST(SolverLoopTest, StopActionEndsTraining) {
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  auto solver = MakeTinySolver("SGD", c, &ctx);
  int polls = 0;
  solver->set_action_callback(
      [&] { return ++polls == 2 ? SolverAction::kStop : SolverAction::kNone; });
  solver->Solve();
  EXPECT_EQ(solver->iter(), 2);
  EXPECT_TRUE(solver->requested_early_exit());
}

TEST(SolverLoopTest, SnapshotActionWritesASnapshot) {
  solver_testing::TempDir dir;
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  c.extra = "snapshot_prefix: '" + (dir / "run") + "'";
  auto solver = MakeTinySolver("SGD", c, &ctx);
  int polls = 0;
  solver->set_action_callback(
      [&] { return ++polls == 1 ? SolverAction::kSnapshot : SolverAction::kNone; });
  solver->Step(2);
  EXPECT_TRUE(std::filesystem::exists(dir / "run_iter_1.caffemodel"));
  EXPECT_TRUE(std::filesystem::exists(dir / "run_iter_1.solverstate"));
  EXPECT_FALSE(std::filesystem::exists(dir / "run_iter_2.caffemodel"));
}

TEST(SolverLoopTest, SolveRunsToMaxIterAndSnapshotsAfterTraining) {
  solver_testing::TempDir dir;
  Context ctx(Device::Cpu(), 1701);
  RuleConfig c;
  c.extra = "snapshot_prefix: '" + (dir / "run") + "' snapshot_after_train: true display: 1";
  caffe::SolverParameter param = TinySolverParam("SGD", c);
  param.set_snapshot_after_train(true);
  auto solver = CreateSolver(param, &ctx);
  solver_testing::LoadTinyProblem(solver.get());
  solver->Solve();
  EXPECT_EQ(solver->iter(), 3);
  EXPECT_FALSE(solver->requested_early_exit());
  EXPECT_TRUE(std::filesystem::exists(dir / "run_iter_3.caffemodel"));
  EXPECT_TRUE(std::filesystem::exists(dir / "run_iter_3.solverstate"));
}

// A net whose data is random: DummyData draws a fresh gaussian batch at every forward.
const char kRandomNet[] = R"(
  name: 'random'
  layer { name: 'data' type: 'DummyData' top: 'x' top: 't'
          dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                             data_filler { type: 'gaussian' std: 1 } } }
  layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y'
          inner_product_param { num_output: 2 weight_filler { type: 'gaussian' std: 0.5 }
                                bias_filler { type: 'constant' value: 0.1 } } }
  layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
)";

caffe::SolverParameter RandomNetSolver(int64_t seed) {
  caffe::SolverParameter param = solver_testing::ParseSolver(
      "base_lr: 0.05 lr_policy: 'fixed' momentum: 0.9 max_iter: 3 solver_mode: CPU "
      "snapshot_after_train: false");
  param.set_random_seed(seed);
  io::ReadProtoFromTextString(kRandomNet, "<random net>", param.mutable_net_param());
  return param;
}

TEST(SolverLoopTest, RandomSeedMakesRunsRepeat) {
  // Same seed: the same initial weights, the same random batches, the same result, even with
  // a different context seed; another seed gives another result.
  auto train = [](int64_t seed, int64_t ctx_seed) {
    Context ctx(Device::Cpu(), ctx_seed);
    auto solver = CreateSolver(RandomNetSolver(seed), &ctx);
    solver->Solve();
    const Tensor* w = solver->net()->learnable_params()[0];
    return std::vector<float>(w->cpu_data(), w->cpu_data() + w->count());
  };
  EXPECT_EQ(train(5, 1), train(5, 2));
  EXPECT_NE(train(5, 1), train(6, 1));
}

TEST(SolverLoopTest, SolverModeIsReadButNotRequiredForCpuContexts) {
  // solver_mode GPU with a CPU context trains on the CPU (the CLI picks the device).
  Context ctx(Device::Cpu(), 1701);
  caffe::SolverParameter param = RandomNetSolver(3);
  param.set_solver_mode(caffe::SolverParameter::GPU);
  auto solver = CreateSolver(param, &ctx);
  solver->Solve();
  EXPECT_EQ(solver->iter(), 3);
}

}  // namespace
}  // namespace cortado
