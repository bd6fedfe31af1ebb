// SPDX-License-Identifier: Apache-2.0
// Snapshots and resuming: a resumed run repeats an uninterrupted one bit for bit (random data,
// momentum history, every update rule, binary and HDF5 files, data layers positioned by Seek),
// bad snapshots fail with errors that name the file and change nothing, and the .sha256 written
// last records both files (as sha256sum would) so that one damaged afterwards is refused.
#include "solvers/snapshot.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/sha256.hpp"
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
  // Restore below checks the snapshot against these digests before loading it.
  ASSERT_TRUE(std::filesystem::exists(resumed / "run_iter_3.sha256"));
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
  // A model replaced by hand: without its digests file, nothing refuses it before the shapes.
  std::filesystem::remove(dir / "run_iter_1.sha256");
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
  const std::string digests = FileBytes(dir / "snaps/run_iter_1.sha256");
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
  EXPECT_EQ(FileBytes(dir / "moved/run_iter_1.sha256"), digests);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path() / "moved"),
                          std::filesystem::directory_iterator()),
            3);
}

// ---- Digests (<prefix>_iter_N.sha256) ----

const char* ModelExt(caffe::SolverParameter::SnapshotFormat format) {
  return format == caffe::SolverParameter::HDF5 ? ".caffemodel.h5" : ".caffemodel";
}
const char* StateExt(caffe::SolverParameter::SnapshotFormat format) {
  return format == caffe::SolverParameter::HDF5 ? ".solverstate.h5" : ".solverstate";
}

// Trains 3 iterations into `dir`/run, snapshotting once at the end.
void TrainThreeIterations(const TempDir& dir, caffe::SolverParameter::SnapshotFormat format) {
  Context ctx(Device::Cpu(), 1);
  CreateSolver(RandomSolver(dir / "run", 3, format), &ctx)->Solve();
}

std::string HexSha256OfFile(const std::string& path) { return ToHex(Sha256(FileBytes(path))); }

// Flips every bit of the byte in the middle of the file at `path`.
void FlipByte(const std::string& path) {
  std::string bytes = FileBytes(path);
  ASSERT_FALSE(bytes.empty()) << path;
  bytes[bytes.size() / 2] = static_cast<char>(~bytes[bytes.size() / 2]);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::error_code ec;
    if (!dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / program, ec)) {
      return true;
    }
  }
  return false;
}

// Runs `command` with sh; returns its stdout and sets `*status` to its exit status.
std::string RunShell(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return output;
  }
  char buffer[512];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
  const int wait_status = pclose(pipe);
  *status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
  return output;
}

void ExpectDigestsRecordBothFiles(caffe::SolverParameter::SnapshotFormat format) {
  TempDir dir;
  TrainThreeIterations(dir, format);
  const std::string model = std::string("run_iter_3") + ModelExt(format);
  const std::string state = std::string("run_iter_3") + StateExt(format);
  ASSERT_TRUE(std::filesystem::exists(dir / "run_iter_3.sha256"));
  // sha256sum's format, model first, as Snapshots.scala writes it.
  const std::string expected = HexSha256OfFile(dir / model) + "  " + model + "\n" +
                               HexSha256OfFile(dir / state) + "  " + state + "\n";
  EXPECT_EQ(FileBytes(dir / "run_iter_3.sha256"), expected);
  // No temporary file is left behind: the model, the state and their digests.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()),
            3);
  EXPECT_EQ(snapshot::DigestsFileFor(dir / state), dir / "run_iter_3.sha256");
  EXPECT_EQ(snapshot::DigestsFileFor(dir / model), dir / "run_iter_3.sha256");

  if (!OnPath("sha256sum")) {
    std::cerr << "sha256sum is not on PATH: the comparison with it is left out\n";
    return;
  }
  const std::string cd = "cd '" + dir.path().string() + "' && ";
  int status = -1;
  EXPECT_EQ(RunShell(cd + "sha256sum " + model + " " + state, &status), expected);
  EXPECT_EQ(status, 0);
  RunShell(cd + "sha256sum --check --status run_iter_3.sha256", &status);
  EXPECT_EQ(status, 0) << "sha256sum -c refuses " << (dir / "run_iter_3.sha256");
}

TEST(SnapshotDigestTest, DigestsFileRecordsBothFilesBinaryProto) {
  ExpectDigestsRecordBothFiles(caffe::SolverParameter::BINARYPROTO);
}

TEST(SnapshotDigestTest, DigestsFileRecordsBothFilesHdf5) {
  if (!io::Hdf5Available()) GTEST_SKIP() << "built without HDF5";
  ExpectDigestsRecordBothFiles(caffe::SolverParameter::HDF5);
}

TEST(SnapshotDigestTest, DigestsFileForOtherNamesIsEmpty) {
  EXPECT_EQ(snapshot::DigestsFileFor("a/b_iter_3.caffemodel"), "a/b_iter_3.sha256");
  EXPECT_EQ(snapshot::DigestsFileFor("a/b_iter_3.solverstate.h5"), "a/b_iter_3.sha256");
  EXPECT_EQ(snapshot::DigestsFileFor("a/b.h5"), "");
  EXPECT_EQ(snapshot::DigestsFileFor("a/weights.bin"), "");
}

// Flips a byte of the model or the state after the snapshot; Restore must refuse it, naming
// the file, both digests and the digests file, and change nothing.
void ExpectDamageIsRefused(caffe::SolverParameter::SnapshotFormat format, bool damage_model) {
  TempDir dir;
  TrainThreeIterations(dir, format);
  const std::string damaged =
      dir / (std::string("run_iter_3") + (damage_model ? ModelExt(format) : StateExt(format)));
  const std::string recorded = HexSha256OfFile(damaged);
  FlipByte(damaged);
  const std::string found = HexSha256OfFile(damaged);
  Context ctx(Device::Cpu(), 1);
  auto solver = CreateSolver(RandomSolver(dir / "other", 6, format), &ctx);
  const Tensor* w = solver->net()->learnable_params()[0];
  const std::vector<float> weights_before(w->cpu_data(), w->cpu_data() + w->count());
  try {
    solver->Restore(dir / (std::string("run_iter_3") + StateExt(format)));
    FAIL() << "expected an error for a damaged " << damaged;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    const std::string what = e.what();
    for (const std::string& word : {damaged, dir / "run_iter_3.sha256", recorded, found,
                                    std::string("damaged"), std::string("previous snapshot")}) {
      EXPECT_NE(what.find(word), std::string::npos) << word << " missing from: " << what;
    }
  }
  EXPECT_EQ(solver->iter(), 0);
  EXPECT_EQ(std::vector<float>(w->cpu_data(), w->cpu_data() + w->count()), weights_before);
}

TEST(SnapshotDigestTest, DamagedModelIsRefusedBinaryProto) {
  ExpectDamageIsRefused(caffe::SolverParameter::BINARYPROTO, true);
}

TEST(SnapshotDigestTest, DamagedStateIsRefusedBinaryProto) {
  ExpectDamageIsRefused(caffe::SolverParameter::BINARYPROTO, false);
}

TEST(SnapshotDigestTest, DamagedModelAndStateAreRefusedHdf5) {
  if (!io::Hdf5Available()) GTEST_SKIP() << "built without HDF5";
  ExpectDamageIsRefused(caffe::SolverParameter::HDF5, true);
  ExpectDamageIsRefused(caffe::SolverParameter::HDF5, false);
}

TEST(SnapshotDigestTest, SnapshotWithoutDigestsRestoresAsBefore) {
  // Caffe's snapshots (and older Cortado's) have no .sha256.
  for (auto format : {caffe::SolverParameter::BINARYPROTO, caffe::SolverParameter::HDF5}) {
    if (format == caffe::SolverParameter::HDF5 && !io::Hdf5Available()) continue;
    TempDir dir;
    TrainThreeIterations(dir, format);
    std::filesystem::remove(dir / "run_iter_3.sha256");
    Context ctx(Device::Cpu(), 1);
    auto solver = CreateSolver(RandomSolver(dir / "other", 6, format), &ctx);
    solver->Restore(dir / (std::string("run_iter_3") + StateExt(format)));
    EXPECT_EQ(solver->iter(), 3);
  }
}

// Restores run_iter_3.solverstate after replacing its .sha256 with `digests`; returns the error.
Error RestoreWithDigests(const TempDir& dir, const std::string& digests) {
  std::ofstream(dir / "run_iter_3.sha256", std::ios::trunc) << digests;
  Context ctx(Device::Cpu(), 1);
  auto solver =
      CreateSolver(RandomSolver(dir / "other", 6, caffe::SolverParameter::BINARYPROTO), &ctx);
  try {
    solver->Restore(dir / "run_iter_3.solverstate");
  } catch (const Error& e) {
    EXPECT_EQ(solver->iter(), 0);
    return e;
  }
  ADD_FAILURE() << "expected an error for digests:\n" << digests;
  return Error(ErrorCode::kInternal, "no error", __FILE__, __LINE__);
}

TEST(SnapshotDigestTest, MalformedOrForeignDigestLinesNameTheFileAndLine) {
  TempDir dir;
  TrainThreeIterations(dir, caffe::SolverParameter::BINARYPROTO);
  const std::string model_line =
      HexSha256OfFile(dir / "run_iter_3.caffemodel") + "  run_iter_3.caffemodel\n";
  const std::string state_digest = HexSha256OfFile(dir / "run_iter_3.solverstate");
  const std::string where = dir / "run_iter_3.sha256";

  Error malformed =
      RestoreWithDigests(dir, model_line + state_digest + " run_iter_3.solverstate\n");
  EXPECT_EQ(malformed.code(), ErrorCode::kParse);
  EXPECT_NE(std::string(malformed.what()).find(where + ":2:"), std::string::npos)
      << malformed.what();

  Error short_digest = RestoreWithDigests(dir, "abc  run_iter_3.solverstate\n" + model_line);
  EXPECT_EQ(short_digest.code(), ErrorCode::kParse);
  EXPECT_NE(std::string(short_digest.what()).find(where + ":1:"), std::string::npos)
      << short_digest.what();

  Error foreign = RestoreWithDigests(dir, model_line + state_digest + "  run_iter_4.solverstate\n");
  EXPECT_EQ(foreign.code(), ErrorCode::kIo);
  for (const std::string& word : {where + ":2:", std::string("run_iter_4.solverstate")}) {
    EXPECT_NE(std::string(foreign.what()).find(word), std::string::npos) << foreign.what();
  }

  Error missing = RestoreWithDigests(dir, model_line);
  EXPECT_EQ(missing.code(), ErrorCode::kIo);
  EXPECT_NE(std::string(missing.what()).find("does not list 'run_iter_3.solverstate'"),
            std::string::npos)
      << missing.what();

  // sha256sum --binary's " *" and upper-case digests are read as well.
  std::string upper = state_digest;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::ofstream(where, std::ios::trunc) << model_line << upper << " *run_iter_3.solverstate\n";
  Context ctx(Device::Cpu(), 1);
  auto solver =
      CreateSolver(RandomSolver(dir / "other", 6, caffe::SolverParameter::BINARYPROTO), &ctx);
  solver->Restore(dir / "run_iter_3.solverstate");
  EXPECT_EQ(solver->iter(), 3);
}

TEST(SnapshotDigestTest, WeightsOfASnapshotAreCheckedAgainstItsDigests) {
  // What `--weights=X.caffemodel` does (tools::ReadWeightsFile).
  TempDir dir;
  TrainThreeIterations(dir, caffe::SolverParameter::BINARYPROTO);
  const std::string model = dir / "run_iter_3.caffemodel";
  EXPECT_TRUE(snapshot::CheckDigestIfPresent(model));
  FlipByte(model);
  try {
    snapshot::CheckDigestIfPresent(model);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(model), std::string::npos) << e.what();
  }
  std::filesystem::remove(dir / "run_iter_3.sha256");
  EXPECT_FALSE(snapshot::CheckDigestIfPresent(model));
  std::filesystem::copy_file(model, dir / "weights.caffemodel");
  EXPECT_FALSE(snapshot::CheckDigestIfPresent(dir / "weights.caffemodel"));
}

TEST(SnapshotDigestTest, WritingDigestsChecksWhatWasWritten) {
  TempDir dir;
  std::ofstream(dir / "a_iter_1.caffemodel", std::ios::binary) << "model bytes";
  std::ofstream(dir / "a_iter_1.solverstate", std::ios::binary) << "state bytes";
  try {
    snapshot::WriteDigests(dir / "a_iter_1.sha256",
                           {{dir / "a_iter_1.caffemodel", ToHex(Sha256("other bytes"))}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("a_iter_1.caffemodel"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "a_iter_1.sha256"));
  snapshot::WriteDigests(dir / "a_iter_1.sha256",
                         {{dir / "a_iter_1.caffemodel", ToHex(Sha256("model bytes"))},
                          {dir / "a_iter_1.solverstate", ""}});
  EXPECT_EQ(FileBytes(dir / "a_iter_1.sha256"),
            ToHex(Sha256("model bytes")) + "  a_iter_1.caffemodel\n" +
                ToHex(Sha256("state bytes")) + "  a_iter_1.solverstate\n");
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
