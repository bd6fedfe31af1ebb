// SPDX-License-Identifier: Apache-2.0
// Snapshots and resuming: a resumed run repeats an uninterrupted one bit for bit (random data,
// momentum history, every update rule, binary and HDF5 files, data layers positioned by Seek),
// and bad snapshots fail with errors that name the file and change nothing.
#include "solvers/snapshot.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "io/hdf5_io.hpp"
#include "io/proto_io.hpp"
#include "layers/layer.hpp"
#include "tiny_problem.hpp"

namespace cortado {
namespace {

// A data layer for these tests: x is TinyX scaled by (1 + batch / 10), t is TinyT, where batch
// counts the forwards since the start of training; Seek sets it (as a real data layer would
// position its stream). The last Seek argument is kept for the tests to read.
class CountingDataLayer final : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "TestCountingData"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int ExactNumTopBlobs() const override { return 2; }
  void Reshape(const std::vector<Tensor*>&, const std::vector<Tensor*>& top) override {
    top[0]->Reshape({2, 3});
    top[1]->Reshape({2, 2});
  }
  void Seek(int64_t batch_index) override {
    batch_ = batch_index;
    last_seek() = batch_index;
  }
  static int64_t& last_seek() {
    static int64_t value = -1;
    return value;
  }

 protected:
  void ForwardCpu(const std::vector<Tensor*>&, const std::vector<Tensor*>& top) override {
    const float scale = 1.0f + static_cast<float>(batch_) / 10.0f;
    for (int i = 0; i < 6; ++i) {
      top[0]->mutable_cpu_data()[i] = static_cast<float>(solver_testing::TinyX()[i]) * scale;
    }
    for (int i = 0; i < 4; ++i) top[1]->mutable_cpu_data()[i] = solver_testing::TinyT()[i];
    ++batch_;
  }
  void BackwardCpu(const std::vector<Tensor*>&, const std::vector<bool>&,
                   const std::vector<Tensor*>&) override {}

 private:
  int64_t batch_ = 0;
};

CORTADO_REGISTER_LAYER(TestCountingData, CountingDataLayer);

using solver_testing::FileBytes;
using solver_testing::TempDir;

// Random data (DummyData with a gaussian filler, drawn at every forward), dropout when this
// build has it, two inner products and a loss.
std::string RandomNet() {
  const bool dropout = LayerRegistry::Get().Has("Dropout");
  return std::string(R"(
    name: 'random'
    layer { name: 'data' type: 'DummyData' top: 'x' top: 't'
            dummy_data_param { shape { dim: 4 dim: 5 } shape { dim: 4 dim: 2 }
                               data_filler { type: 'gaussian' std: 1 } } }
    layer { name: 'ip1' type: 'InnerProduct' bottom: 'x' top: 'h'
            inner_product_param { num_output: 6 weight_filler { type: 'gaussian' std: 0.5 }
                                  bias_filler { type: 'constant' value: 0.1 } } }
  )") +
         (dropout ? "layer { name: 'drop' type: 'Dropout' bottom: 'h' top: 'h' "
                    "        dropout_param { dropout_ratio: 0.5 } }"
                  : "") +
         R"(
    layer { name: 'ip2' type: 'InnerProduct' bottom: 'h' top: 'y'
            inner_product_param { num_output: 2 weight_filler { type: 'gaussian' std: 0.5 } } }
    layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
  )";
}

caffe::SolverParameter RandomSolver(const std::string& prefix, int max_iter,
                                    caffe::SolverParameter::SnapshotFormat format,
                                    const std::string& type = "SGD") {
  caffe::SolverParameter param = solver_testing::ParseSolver(
      "base_lr: 0.05 lr_policy: 'step' gamma: 0.5 stepsize: 2 random_seed: 42 "
      "solver_mode: CPU snapshot_after_train: true");
  param.set_type(type);
  param.set_momentum(type == "AdaGrad" || type == "RMSProp" ? 0.0f : 0.9f);
  param.set_max_iter(max_iter);
  param.set_snapshot_prefix(prefix);
  param.set_snapshot_format(format);
  io::ReadProtoFromTextString(RandomNet(), "<random net>", param.mutable_net_param());
  return param;
}

// Trains 6 iterations straight, and 3 + (restore in a new solver) 3; the final models must be
// the same bytes.
void ExpectResumeIsExact(caffe::SolverParameter::SnapshotFormat format, const std::string& type) {
  const bool hdf5 = format == caffe::SolverParameter::HDF5;
  const std::string model_ext = hdf5 ? ".caffemodel.h5" : ".caffemodel";
  const std::string state_ext = hdf5 ? ".solverstate.h5" : ".solverstate";
  TempDir straight, resumed;
  {
    Context ctx(Device::Cpu(), 1);
    caffe::SolverParameter param = RandomSolver(straight / "run", 6, format, type);
    param.set_snapshot(3);
    auto solver = CreateSolver(param, &ctx);
    solver->Solve();
  }
  {
    Context ctx(Device::Cpu(), 2);  // the context seed must not matter
    auto solver = CreateSolver(RandomSolver(resumed / "run", 3, format, type), &ctx);
    solver->Solve();
  }
  ASSERT_TRUE(std::filesystem::exists(resumed / ("run_iter_3" + state_ext)));
  EXPECT_EQ(FileBytes(straight / ("run_iter_3" + model_ext)),
            FileBytes(resumed / ("run_iter_3" + model_ext)));
  {
    Context ctx(Device::Cpu(), 3);
    auto solver = CreateSolver(RandomSolver(resumed / "run", 6, format, type), &ctx);
    solver->Solve(resumed / ("run_iter_3" + state_ext));
    EXPECT_EQ(solver->iter(), 6);
  }
  const std::string a = FileBytes(straight / ("run_iter_6" + model_ext));
  const std::string b = FileBytes(resumed / ("run_iter_6" + model_ext));
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << type << ": the resumed run's model differs from the straight run's";
}

TEST(SnapshotTest, ResumeIsBitExactBinaryProto) {
  ExpectResumeIsExact(caffe::SolverParameter::BINARYPROTO, "SGD");
}

TEST(SnapshotTest, ResumeIsBitExactHdf5) {
  if (!io::Hdf5Available()) GTEST_SKIP() << "built without HDF5";
  ExpectResumeIsExact(caffe::SolverParameter::HDF5, "SGD");
}

TEST(SnapshotTest, ResumeIsBitExactForEveryRule) {
  for (const char* type : {"Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam"}) {
    ExpectResumeIsExact(caffe::SolverParameter::BINARYPROTO, type);
  }
}

TEST(SnapshotTest, RandomDataDiffersBetweenIterations) {
  // Guards the test above: if every iteration drew the same batch, resuming would be trivial.
  Context ctx(Device::Cpu(), 1);
  TempDir dir;
  auto solver =
      CreateSolver(RandomSolver(dir / "run", 2, caffe::SolverParameter::BINARYPROTO), &ctx);
  const Tensor* x = solver->net()->blob_by_name("x");
  solver->Step(1);
  const std::vector<float> first(x->cpu_data(), x->cpu_data() + x->count());
  solver->Step(1);
  const std::vector<float> second(x->cpu_data(), x->cpu_data() + x->count());
  EXPECT_NE(first, second);
}

TEST(SnapshotTest, StateHoldsIterLearnedNetHistoryAndStep) {
  TempDir dir;
  Context ctx(Device::Cpu(), 1);
  caffe::SolverParameter param = RandomSolver(dir / "run", 3, caffe::SolverParameter::BINARYPROTO);
  auto solver = CreateSolver(param, &ctx);
  solver->Solve();
  caffe::SolverState state;
  io::ReadProtoFromBinaryFile(dir / "run_iter_3.solverstate", &state);
  EXPECT_EQ(state.iter(), 3);
  EXPECT_EQ(state.learned_net(), dir / "run_iter_3.caffemodel");
  EXPECT_EQ(state.current_step(), 1);  // step policy, stepsize 2, last rate at iteration 2
  ASSERT_EQ(state.history_size(), 4);  // ip1 weight, bias, ip2 weight, bias
  EXPECT_EQ(ProtoShapeString(state.history(0)), "6 5 (30)");
  EXPECT_EQ(ProtoShapeString(state.history(1)), "6 (6)");
  const Tensor& h0 = *solver->history()[0];
  for (int i = 0; i < h0.count(); ++i) EXPECT_EQ(state.history(0).data(i), h0.cpu_data()[i]);
  // The model loads back into a fresh net of the same definition.
  caffe::NetParameter model = io::ReadNetParameterFromBinaryFile(dir / "run_iter_3.caffemodel");
  EXPECT_EQ(model.layer_size(), solver->net()->layers().size());
}

TEST(SnapshotTest, SnapshotDiffWritesGradients) {
  TempDir dir;
  Context ctx(Device::Cpu(), 1);
  caffe::SolverParameter param = RandomSolver(dir / "run", 1, caffe::SolverParameter::BINARYPROTO);
  param.set_snapshot_diff(true);
  CreateSolver(param, &ctx)->Solve();
  caffe::NetParameter model = io::ReadNetParameterFromBinaryFile(dir / "run_iter_1.caffemodel");
  bool found = false;
  for (const auto& layer : model.layer()) {
    if (layer.name() == "ip1") {
      found = true;
      EXPECT_EQ(layer.blobs(0).diff_size(), layer.blobs(0).data_size());
    }
  }
  EXPECT_TRUE(found);
}

TEST(SnapshotTest, RestoreSeeksDataLayersToIterTimesIterSize) {
  // With a data layer whose batches depend on their position, straight and resumed runs agree
  // only if Restore positions it at iter * iter_size.
  const std::string net = R"(
    name: 'counting'
    layer { name: 'data' type: 'TestCountingData' top: 'x' top: 't' }
    layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y'
            inner_product_param { num_output: 2 bias_term: false
                                  weight_filler { type: 'gaussian' std: 0.5 } } }
    layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
  )";
  auto param_for = [&](const std::string& prefix, int max_iter) {
    caffe::SolverParameter param = solver_testing::ParseSolver(
        "base_lr: 0.05 lr_policy: 'fixed' momentum: 0.9 random_seed: 7 iter_size: 2 "
        "solver_mode: CPU");
    param.set_max_iter(max_iter);
    param.set_snapshot_prefix(prefix);
    io::ReadProtoFromTextString(net, "<counting net>", param.mutable_net_param());
    return param;
  };
  TempDir straight, resumed;
  {
    Context ctx(Device::Cpu(), 1);
    CreateSolver(param_for(straight / "run", 4), &ctx)->Solve();
  }
  {
    Context ctx(Device::Cpu(), 1);
    CreateSolver(param_for(resumed / "run", 2), &ctx)->Solve();
  }
  {
    Context ctx(Device::Cpu(), 1);
    auto solver = CreateSolver(param_for(resumed / "run", 4), &ctx);
    solver->Restore(resumed / "run_iter_2.solverstate");
    EXPECT_EQ(CountingDataLayer::last_seek(), 4);  // 2 iterations x iter_size 2
    solver->Solve();
  }
  EXPECT_EQ(FileBytes(straight / "run_iter_4.caffemodel"),
            FileBytes(resumed / "run_iter_4.caffemodel"));
}

TEST(SnapshotTest, MovedSnapshotsAreFoundNextToTheStateFile) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "old");
  {
    Context ctx(Device::Cpu(), 1);
    CreateSolver(RandomSolver(dir / "old/run", 2, caffe::SolverParameter::BINARYPROTO), &ctx)
        ->Solve();
  }
  std::filesystem::rename(dir.path() / "old", dir.path() / "new");
  Context ctx(Device::Cpu(), 1);
  auto solver =
      CreateSolver(RandomSolver(dir / "new/run", 4, caffe::SolverParameter::BINARYPROTO), &ctx);
  solver->Restore(dir / "new/run_iter_2.solverstate");
  EXPECT_EQ(solver->iter(), 2);
  std::filesystem::remove(dir.path() / "new/run_iter_2.caffemodel");
  try {
    solver->Restore(dir / "new/run_iter_2.solverstate");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("run_iter_2.caffemodel"), std::string::npos) << e.what();
  }
}

// Tiny problem with the weight 2x3 (num_output 2) or 3x3 (num_output 3).
caffe::SolverParameter TinyParam(const std::string& type, int num_output,
                                 const std::string& prefix) {
  solver_testing::RuleConfig config;
  caffe::SolverParameter param = solver_testing::TinySolverParam(type, config);
  param.set_snapshot_prefix(prefix);
  param.set_snapshot_after_train(true);
  param.mutable_net_param()->mutable_layer(0)->mutable_input_param()->mutable_shape(1)->set_dim(
      1, num_output);
  param.mutable_net_param()->mutable_layer(1)->mutable_inner_product_param()->set_num_output(
      num_output);
  return param;
}

TEST(SnapshotTest, MismatchedHistoryShapeIsAnErrorAndChangesNothing) {
  TempDir dir;
  {
    Context ctx(Device::Cpu(), 1);
    CreateSolver(TinyParam("SGD", 2, dir / "run"), &ctx)->Solve();
  }
  const std::string model_before = FileBytes(dir / "run_iter_3.caffemodel");
  const std::string state_before = FileBytes(dir / "run_iter_3.solverstate");

  Context ctx(Device::Cpu(), 1);
  auto solver = CreateSolver(TinyParam("SGD", 3, dir / "other"), &ctx);
  const Tensor* w = solver->net()->learnable_params()[0];
  const std::vector<float> weights_before(w->cpu_data(), w->cpu_data() + w->count());
  try {
    solver->Restore(dir / "run_iter_3.solverstate");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    for (const std::string& word :
         {dir / "run_iter_3.solverstate", std::string("blob 0"), std::string("ip[0]"),
          std::string("2 3 (6)"), std::string("3 3 (9)")}) {
      EXPECT_NE(what.find(word), std::string::npos) << word << " missing from: " << what;
    }
  }
  EXPECT_EQ(solver->iter(), 0);
  EXPECT_EQ(std::vector<float>(w->cpu_data(), w->cpu_data() + w->count()), weights_before);
  EXPECT_EQ(FileBytes(dir / "run_iter_3.caffemodel"), model_before);
  EXPECT_EQ(FileBytes(dir / "run_iter_3.solverstate"), state_before);
}

TEST(SnapshotTest, HistoryOfAnotherRuleIsAnError) {
  // Adam keeps two history sets, SGD one.
  TempDir dir;
  {
    Context ctx(Device::Cpu(), 1);
    CreateSolver(TinyParam("Adam", 2, dir / "run"), &ctx)->Solve();
  }
  Context ctx(Device::Cpu(), 1);
  auto solver = CreateSolver(TinyParam("SGD", 2, dir / "other"), &ctx);
  try {
    solver->Restore(dir / "run_iter_3.solverstate");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("holds 2 history blob(s)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(solver->iter(), 0);
}

TEST(SnapshotTest, WeightsThatDoNotFitAreRolledBack) {
  // The history matches, but learned_net points to a model whose second layer has another
  // shape: the first layer's weights, already copied when the second fails, are put back.
  const std::string two_layers = R"(
    name: 'two'
    layer { name: 'in' type: 'Input' top: 'x' top: 't'
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: NOUT } } }
    layer { name: 'ip1' type: 'InnerProduct' bottom: 'x' top: 'h'
            inner_product_param { num_output: 3 weight_filler { type: 'gaussian' std: 0.5 } } }
    layer { name: 'ip2' type: 'InnerProduct' bottom: 'h' top: 'y'
            inner_product_param { num_output: NOUT weight_filler { type: 'gaussian' std: 0.5 } } }
    layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' }
  )";
  auto net_text = [&](int nout) {
    std::string text = two_layers;
    for (size_t pos; (pos = text.find("NOUT")) != std::string::npos;) {
      text.replace(pos, 4, std::to_string(nout));
    }
    return text;
  };
  auto param_for = [&](int nout, const std::string& prefix, int64_t seed) {
    caffe::SolverParameter param =
        solver_testing::ParseSolver("base_lr: 0.1 lr_policy: 'fixed' max_iter: 1 solver_mode: CPU");
    param.set_random_seed(seed);
    param.set_snapshot_prefix(prefix);
    io::ReadProtoFromTextString(net_text(nout), "<two>", param.mutable_net_param());
    return param;
  };
  TempDir dir;
  {
    Context ctx(Device::Cpu(), 1);
    CreateSolver(param_for(2, dir / "run", 1), &ctx)->Solve();
  }
  {
    // Replace the model with one whose ip2 has 4 outputs (same ip1 shape).
    Context ctx(Device::Cpu(), 1);
    Net other(param_for(4, dir / "x", 2).net_param(), &ctx);
    caffe::NetParameter proto;
    other.ToProto(&proto);
    io::WriteProtoToBinaryFile(proto, dir / "run_iter_1.caffemodel");
  }
  Context ctx(Device::Cpu(), 1);
  auto solver = CreateSolver(param_for(2, dir / "other", 3), &ctx);
  std::vector<std::vector<float>> before;
  for (const Tensor* p : solver->net()->learnable_params()) {
    before.emplace_back(p->cpu_data(), p->cpu_data() + p->count());
  }
  try {
    solver->Restore(dir / "run_iter_1.solverstate");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("run_iter_1.caffemodel"), std::string::npos) << what;
    EXPECT_NE(what.find("ip2"), std::string::npos) << what;
  }
  for (size_t i = 0; i < before.size(); ++i) {
    const Tensor* p = solver->net()->learnable_params()[i];
    EXPECT_EQ(std::vector<float>(p->cpu_data(), p->cpu_data() + p->count()), before[i])
        << "param " << i;
  }
  EXPECT_EQ(solver->iter(), 0);
}

TEST(SnapshotTest, PrefixInAMissingDirectoryIsAnIoErrorNamingIt) {
  TempDir dir;
  Context ctx(Device::Cpu(), 1);
  caffe::SolverParameter param = TinyParam("SGD", 2, dir / "no_such_dir/run");
  param.set_snapshot(1);
  // Found before the first iteration, not at the first snapshot.
  auto solver = CreateSolver(param, &ctx);
  try {
    solver->Step(1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(dir / "no_such_dir/run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(solver->iter(), 0);
  // A snapshot writer stores snapshots elsewhere: nothing to check.
  solver->set_snapshot_writer([] {});
  solver->Step(1);
  EXPECT_EQ(solver->iter(), 1);
}

TEST(SnapshotTest, FailedSnapshotLeavesEarlierSnapshotsIntact) {
  // The snapshot directory disappears (here: is renamed) after the first snapshot; the second
  // fails with kIo naming its path, and the first one's files are untouched.
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "snaps");
  Context ctx(Device::Cpu(), 1);
  caffe::SolverParameter param = TinyParam("SGD", 2, dir / "snaps/run");
  param.set_snapshot(1);
  auto solver = CreateSolver(param, &ctx);
  solver_testing::LoadTinyProblem(solver.get());
  solver->Step(1);
  const std::string model = FileBytes(dir / "snaps/run_iter_1.caffemodel");
  const std::string state = FileBytes(dir / "snaps/run_iter_1.solverstate");
  std::filesystem::rename(dir.path() / "snaps", dir.path() / "moved");
  try {
    solver->Step(1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(dir / "snaps/run_iter_2.caffemodel"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(FileBytes(dir / "moved/run_iter_1.caffemodel"), model);
  EXPECT_EQ(FileBytes(dir / "moved/run_iter_1.solverstate"), state);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path() / "moved"),
                          std::filesystem::directory_iterator()),
            2);
}

TEST(SnapshotTest, ReadSolverFileDerivesTheSnapshotPrefix) {
  TempDir dir;
  std::ofstream(dir / "lenet_solver.prototxt") << "base_lr: 0.01 net: 'x.prototxt'";
  EXPECT_EQ(ReadSolverFile(dir / "lenet_solver.prototxt").snapshot_prefix(), dir / "lenet_solver");
  std::filesystem::create_directories(dir.path() / "snaps");
  std::ofstream(dir / "with_dir.prototxt") << "snapshot_prefix: '" + (dir / "snaps") + "'";
  EXPECT_EQ(ReadSolverFile(dir / "with_dir.prototxt").snapshot_prefix(), dir / "snaps/with_dir");
}

}  // namespace
}  // namespace cortado
