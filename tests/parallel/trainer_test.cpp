// SPDX-License-Identifier: Apache-2.0
// The training session. The multi-replica tests run their replicas on GPU 0 when there is one
// (the device-copy path) and on CPU threads otherwise (host memory); the NCCL test needs two
// GPUs.
#include "parallel/trainer.hpp"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "data/base_data_layer.hpp"
#include "data/batch_feed.hpp"
#include "data/data_test_util.hpp"
#include "io/proto_io.hpp"
#include "support/gpu_check.hpp"

namespace cortado {
namespace {

// A prefetching data layer whose source batch k is data [2, 3] and targets [2, 2], both smooth
// functions of k, that fails with kIo at source batch `fail_at_source_batch`.
std::atomic<int64_t> fail_at_source_batch{-1};

class ShardFailDataLayer final : public BasePrefetchingDataLayer {
 public:
  using BasePrefetchingDataLayer::BasePrefetchingDataLayer;
  ~ShardFailDataLayer() override { StopPrefetch(); }
  const char* type() const override { return "ShardFailData"; }
  int ExactNumTopBlobs() const override { return 2; }

 protected:
  void DataSetup(const std::vector<Tensor*>& top) override {
    top[0]->Reshape({2, 3});
    top[1]->Reshape({2, 2});
  }
  void LoadBatch(int64_t index, Rng* /*rng*/, DataBatch* batch) override {
    if (index == fail_at_source_batch.load()) {
      CORTADO_THROW(kIo, "{}: cannot read batch {}", Describe(), index);
    }
    batch->shapes = {{2, 3}, {2, 2}};
    batch->tops.assign(2, {});
    for (int j = 0; j < 6; ++j) batch->tops[0].push_back(std::sin(0.7f * index + j));
    for (int j = 0; j < 4; ++j) batch->tops[1].push_back(std::cos(0.3f * index + j));
  }
};

CORTADO_REGISTER_LAYER(ShardFailData, ShardFailDataLayer);

using testing::TempDir;

// An LMDB of `n` 1 x 2 x 3 records with varied bytes; record i has label i % 3.
std::string WriteDb(const TempDir& dir, int n) {
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = 0; i < n; ++i) {
    records.emplace_back(testing::Key(i),
                         testing::ByteDatum(1, 2, 3, (i * 37) % 200, i % 3).SerializeAsString());
  }
  const std::string path = dir / "db";
  testing::WriteLmdb(path, records);
  return path;
}

caffe::SolverParameter Parse(const std::string& text) {
  caffe::SolverParameter param;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param)) << text;
  return param;
}

// SGD with momentum and weight decay on Data (batch_size) -> InnerProduct -> ReLU ->
// InnerProduct -> SoftmaxWithLoss.
caffe::SolverParameter DataSolver(const std::string& db, int batch_size, int max_iter,
                                  const std::string& extra = "") {
  return Parse(
      "type: 'SGD' base_lr: 0.05 momentum: 0.9 weight_decay: 0.0005 lr_policy: 'fixed' "
      "random_seed: 1701 display: 0 snapshot_after_train: false max_iter: " +
      std::to_string(max_iter) + " " + extra +
      " net_param { name: 'tiny' "
      "layer { name: 'data' type: 'Data' top: 'data' top: 'label' "
      "  transform_param { scale: 0.0078125 } "
      "  data_param { source: '" +
      db + "' backend: LMDB batch_size: " + std::to_string(batch_size) +
      " } } "
      "layer { name: 'ip1' type: 'InnerProduct' bottom: 'data' top: 'ip1' "
      "  inner_product_param { num_output: 5 weight_filler { type: 'gaussian' std: 0.3 } "
      "                        bias_filler { type: 'constant' value: 0.1 } } } "
      "layer { name: 'relu' type: 'ReLU' bottom: 'ip1' top: 'ip1' } "
      "layer { name: 'ip2' type: 'InnerProduct' bottom: 'ip1' top: 'ip2' "
      "  inner_product_param { num_output: 3 weight_filler { type: 'gaussian' std: 0.3 } } } "
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip2' bottom: 'label' top: 'loss' } "
      "}");
}

// ShardFailData -> InnerProduct -> EuclideanLoss.
caffe::SolverParameter FailingSolver(int max_iter) {
  return Parse(
      "type: 'SGD' base_lr: 0.01 lr_policy: 'fixed' random_seed: 3 display: 0 "
      "snapshot_after_train: false max_iter: " +
      std::to_string(max_iter) +
      " net_param { name: 'failing' "
      "layer { name: 'data' type: 'ShardFailData' top: 'x' top: 't' } "
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y' "
      "  inner_product_param { num_output: 2 weight_filler { type: 'gaussian' std: 0.5 } } } "
      "layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' } }");
}

std::vector<std::vector<float>> Weights(const Solver& solver) {
  std::vector<std::vector<float>> weights;
  for (Tensor* p : solver.net()->learnable_params()) {
    weights.emplace_back(p->cpu_data(), p->cpu_data() + p->count());
  }
  return weights;
}

void ExpectClose(const std::vector<std::vector<float>>& expected,
                 const std::vector<std::vector<float>>& actual, float tolerance) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].size(), actual[i].size()) << "parameter " << i;
    int failures = 0;
    for (size_t j = 0; j < expected[i].size() && failures < 10; ++j) {
      const float scale = std::max({std::fabs(expected[i][j]), std::fabs(actual[i][j]), 1.0f});
      if (!(std::fabs(expected[i][j] - actual[i][j]) <= tolerance * scale)) {
        ++failures;
        ADD_FAILURE() << "parameter " << i << " element " << j << ": expected " << expected[i][j]
                      << ", got " << actual[i][j];
      }
    }
  }
}

std::string Message(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return {};
}

// ---- anywhere -------------------------------------------------------------------------------

TEST(TrainerTest, OneCpuReplicaIsAPlainSolver) {
  TempDir dir;
  const caffe::SolverParameter param = DataSolver(WriteDb(dir, 10), 2, 4);
  Context ctx(Device::Cpu());
  std::unique_ptr<Solver> solver = CreateSolver(param, &ctx);
  solver->Solve();
  Trainer trainer(param, {Device::Cpu()});
  EXPECT_EQ(trainer.num_replicas(), 1);
  EXPECT_STREQ(trainer.sync_name(), "none");
  trainer.Solve();
  EXPECT_EQ(trainer.root()->iter(), 4);
  EXPECT_EQ(Weights(*solver), Weights(*trainer.root()));
}

TEST(TrainerTest, CpuAndGpuReplicasDoNotMix) {
  TempDir dir;
  const std::string message = Message([&] {
    Trainer trainer(DataSolver(WriteDb(dir, 10), 2, 4), {Device::Cpu(), Device::Cuda(0)});
  });
  EXPECT_NE(message.find("all on CPUs or all on CUDA devices"), std::string::npos) << message;
}

TEST(TrainerTest, AMissingGpuIsNamed) {
  TempDir dir;
  const caffe::SolverParameter param = DataSolver(WriteDb(dir, 10), 2, 4);
  const std::string message = Message([&] {
    Trainer trainer(param, {Device::Cuda(97), Device::Cuda(97)});
  });
  EXPECT_NE(message.find("97"), std::string::npos) << message;
}

TEST(TrainerTest, NoDeviceIsAnError) {
  TempDir dir;
  EXPECT_THROW(Trainer(DataSolver(WriteDb(dir, 10), 2, 4), {}), Error);
}

// ---- several replicas: on GPU 0 when there is one, else on CPU threads --------------------

// `n` replicas: all on GPU 0 when a CUDA device exists, else all on the CPU.
std::vector<Device> Replicas(int n) {
  const Device device = Context::CudaDeviceCount() > 0 ? Device::Cuda(0) : Device::Cpu();
  return std::vector<Device>(static_cast<size_t>(n), device);
}

TEST(TrainerTest, TwoReplicasTrainLikeOneWithTwiceTheBatch) {
  TempDir dir;
  const std::string db = WriteDb(dir, 20);  // 6 steps of 4 samples wrap around
  Trainer one(DataSolver(db, 4, 6), Replicas(1));
  caffe::NetParameter initial;
  one.root()->net()->ToProto(&initial);
  const auto initial_weights = Weights(*one.root());
  Trainer two(DataSolver(db, 2, 6), Replicas(2));
  EXPECT_EQ(two.num_replicas(), 2);
  EXPECT_STREQ(two.sync_name(), Replicas(1)[0].is_cuda() ? "device copies" : "host memory");
  // Root's weights reach the other replica (as --weights does).
  two.root()->net()->CopyTrainedLayersFrom(initial);
  one.Solve();
  two.Solve();
  EXPECT_EQ(one.root()->iter(), 6);
  EXPECT_EQ(two.root()->iter(), 6);
  EXPECT_EQ(two.replica(1)->iter(), 6);
  EXPECT_FALSE(two.root()->requested_early_exit());
  ExpectClose(Weights(*one.root()), Weights(*two.root()), 1e-4f);
  // Replicas apply the same update to the same weights: they stay identical.
  EXPECT_EQ(Weights(*two.root()), Weights(*two.replica(1)));
  EXPECT_NE(Weights(*two.root()), initial_weights);  // it did train
}

TEST(TrainerTest, ThreeReplicasWithIterSizeTrainLikeOneWithThriceTheBatch) {
  TempDir dir;
  const std::string db = WriteDb(dir, 16);
  Trainer one(DataSolver(db, 3, 4, "iter_size: 2"), Replicas(1));
  caffe::NetParameter initial;
  one.root()->net()->ToProto(&initial);
  Trainer three(DataSolver(db, 1, 4, "iter_size: 2"), Replicas(3));
  three.root()->net()->CopyTrainedLayersFrom(initial);
  one.Solve();
  three.Solve();
  ExpectClose(Weights(*one.root()), Weights(*three.root()), 1e-4f);
  EXPECT_EQ(Weights(*three.root()), Weights(*three.replica(2)));
}

// iter_size 2 of batch 2 is batch 4 for every learnable layer: each accumulates its gradient
// over the passes (a layer that wrote it instead would keep only the last pass's).
TEST(TrainerTest, IterSizeAccumulatesTheGradientOfConvolutionsToo) {
  TempDir dir;
  const std::string db = WriteDb(dir, 16);
  const auto solver = [&](int batch, int iter_size) {
    return Parse(
        "type: 'SGD' base_lr: 0.05 momentum: 0.9 weight_decay: 0.0005 lr_policy: 'fixed' "
        "random_seed: 1701 display: 0 snapshot_after_train: false max_iter: 4 iter_size: " +
        std::to_string(iter_size) +
        " net_param { name: 'conv' "
        "layer { name: 'data' type: 'Data' top: 'data' top: 'label' "
        "  transform_param { scale: 0.0078125 } "
        "  data_param { source: '" +
        db + "' backend: LMDB batch_size: " + std::to_string(batch) +
        " } } "
        "layer { name: 'conv' type: 'Convolution' bottom: 'data' top: 'conv' "
        "  convolution_param { num_output: 4 kernel_size: 2 "
        "    weight_filler { type: 'gaussian' std: 0.5 } bias_filler { type: 'constant' value: 0.1 "
        "} } } "
        "layer { name: 'pool' type: 'Pooling' bottom: 'conv' top: 'pool' "
        "  pooling_param { pool: MAX kernel_h: 1 kernel_w: 2 stride: 1 } } "
        "layer { name: 'relu' type: 'ReLU' bottom: 'pool' top: 'pool' } "
        "layer { name: 'ip' type: 'InnerProduct' bottom: 'pool' top: 'ip' "
        "  inner_product_param { num_output: 3 weight_filler { type: 'gaussian' std: 0.5 } } } "
        "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip' bottom: 'label' top: 'loss' } "
        "}");
  };
  Trainer whole(solver(4, 1), Replicas(1));
  caffe::NetParameter initial;
  whole.root()->net()->ToProto(&initial);
  Trainer halves(solver(2, 2), Replicas(1));
  halves.root()->net()->CopyTrainedLayersFrom(initial);
  whole.Solve();
  halves.Solve();
  ExpectClose(Weights(*whole.root()), Weights(*halves.root()), 1e-5f);
  EXPECT_NE(Weights(*whole.root())[0], std::vector<float>(initial.layer(1).blobs(0).data().begin(),
                                                          initial.layer(1).blobs(0).data().end()));
}

TEST(TrainerTest, RootWeightsReachEveryReplicaBeforeTraining) {
  TempDir dir;
  Trainer trainer(DataSolver(WriteDb(dir, 10), 2, 0), Replicas(2));
  for (Tensor* p : trainer.root()->net()->learnable_params()) {
    std::fill(p->mutable_cpu_data(), p->mutable_cpu_data() + p->count(), 0.25f);
  }
  trainer.Solve();
  for (const auto& values : Weights(*trainer.replica(1))) {
    for (float v : values) ASSERT_EQ(v, 0.25f);
  }
}

TEST(TrainerTest, AResumedRunRepeatsAnUninterruptedOne) {
  TempDir dir;
  const std::string db = WriteDb(dir, 20);
  const std::string extra = "snapshot: 3 snapshot_prefix: '" + (dir / "snap") + "'";
  Trainer straight(DataSolver(db, 2, 6, extra), Replicas(2));
  straight.Solve();
  ASSERT_TRUE(std::filesystem::exists(dir / "snap_iter_3.solverstate"));
  Trainer resumed(DataSolver(db, 2, 6, extra), Replicas(2));
  resumed.Solve(dir / "snap_iter_3.solverstate");
  EXPECT_EQ(resumed.root()->iter(), 6);
  EXPECT_EQ(resumed.replica(1)->iter(), 6);
  ExpectClose(Weights(*straight.root()), Weights(*resumed.root()), 1e-6f);
  EXPECT_EQ(Weights(*resumed.root()), Weights(*resumed.replica(1)));
}

TEST(TrainerTest, AStopSeenByRootStopsEveryReplicaAtTheSameIteration) {
  TempDir dir;
  Trainer trainer(DataSolver(WriteDb(dir, 10), 2, 20), Replicas(2));
  int polls = 0;
  // Root polls at each gradient hook and after each update: the 4th poll is after iteration
  // 1's update; the stop is published at iteration 2's hook, and everyone stops after it.
  trainer.set_action_callback(
      [&polls] { return ++polls == 4 ? SolverAction::kStop : SolverAction::kNone; });
  trainer.Solve();
  EXPECT_EQ(trainer.root()->iter(), 3);
  EXPECT_EQ(trainer.replica(1)->iter(), 3);
  EXPECT_TRUE(trainer.root()->requested_early_exit());
  EXPECT_TRUE(trainer.replica(1)->requested_early_exit());
  EXPECT_EQ(Weights(*trainer.root()), Weights(*trainer.replica(1)));
}

TEST(TrainerTest, AStopRequestedAtAnIterationStopsThereAndTakesTheClosingSnapshot) {
  for (int replicas : {1, 2}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas");
    TempDir dir;
    const std::string prefix = dir / "snap";
    caffe::SolverParameter param =
        DataSolver(WriteDb(dir, 10), 2, 20, "snapshot_prefix: '" + prefix + "'");
    param.set_snapshot_after_train(true);
    Trainer trainer(param, Replicas(replicas));
    trainer.RequestStopAt(5);
    trainer.Solve();
    EXPECT_EQ(trainer.root()->iter(), 5);
    EXPECT_EQ(trainer.replica(replicas - 1)->iter(), 5);
    EXPECT_TRUE(trainer.root()->requested_early_exit());
    EXPECT_TRUE(std::filesystem::exists(prefix + "_iter_5.solverstate"));
    EXPECT_FALSE(std::filesystem::exists(prefix + "_iter_20.solverstate"));
    // An iteration already passed: the iteration in progress is the last.
    trainer.RequestStopAt(2);
    trainer.Step(10);
    EXPECT_EQ(trainer.root()->iter(), 6);
    // Withdrawn: training runs on.
    trainer.RequestStopAt(-1);
    trainer.Step(3);
    EXPECT_EQ(trainer.root()->iter(), 9);
  }
}

TEST(TrainerTest, ASnapshotRequestIsRootsAlone) {
  TempDir dir;
  Trainer trainer(DataSolver(WriteDb(dir, 10), 2, 3, "snapshot_prefix: '" + (dir / "snap") + "'"),
                  Replicas(2));
  int polls = 0;
  trainer.set_action_callback(
      [&polls] { return ++polls == 1 ? SolverAction::kSnapshot : SolverAction::kNone; });
  trainer.Solve();
  EXPECT_EQ(trainer.root()->iter(), 3);
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_1.caffemodel"));
  EXPECT_TRUE(std::filesystem::exists(dir / "snap_iter_1.solverstate"));
  EXPECT_FALSE(std::filesystem::exists(dir / "snap_iter_3.caffemodel"));
}

// Source batch 3 is replica 1's second batch (batch 1 * 2 + 1), source batch 2 root's.
TEST(TrainerTest, AFailingReplicaMakesSolveThrowInsteadOfHanging) {
  for (int failing : {1, 0}) {
    SCOPED_TRACE("failing replica " + std::to_string(failing));
    fail_at_source_batch.store(2 + failing);
    Trainer trainer(FailingSolver(10), Replicas(2));
    try {
      trainer.Solve();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kIo) << message;
      EXPECT_NE(
          message.find("replica " + std::to_string(failing) + " on " + Replicas(1)[0].ToString()),
          std::string::npos)
          << message;
      EXPECT_NE(message.find("cannot read batch " + std::to_string(2 + failing)), std::string::npos)
          << message;
    }
    try {
      trainer.Solve();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
    }
  }
  fail_at_source_batch.store(-1);
}

// ---- two GPUs -------------------------------------------------------------------------------

TEST(TrainerTest, TwoGpusTrainLikeOneWithTwiceTheBatch) {
  CORTADO_REQUIRE_GPU();
  if (Context::CudaDeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices";
  TempDir dir;
  const std::string db = WriteDb(dir, 20);
  Trainer one(DataSolver(db, 4, 6), Replicas(1));
  caffe::NetParameter initial;
  one.root()->net()->ToProto(&initial);
  Trainer two(DataSolver(db, 2, 6), {Device::Cuda(0), Device::Cuda(1)});
  EXPECT_STREQ(two.sync_name(), CORTADO_WITH_NCCL ? "nccl" : "device copies");
  two.root()->net()->CopyTrainedLayersFrom(initial);
  one.Solve();
  two.Solve();
  ExpectClose(Weights(*one.root()), Weights(*two.root()), 1e-4f);
  ExpectClose(Weights(*two.root()), Weights(*two.replica(1)), 1e-6f);
}

// ---- the session: gradient seam, events, bytes, feeds, abort -------------------------------

// x = 1 -> InnerProduct (one weight w = 0.5, no bias) -> EuclideanLoss against t = 2, plain SGD
// with base_lr 0.1: loss = (w - t)^2 / 2 = 1.125, dL/dw = w - t = -1.5, so one step gives
// w = 0.5 - 0.1 * (-1.5) = 0.65, and 0.575 when the hook halves the gradient.
caffe::SolverParameter HandSolver(int max_iter) {
  return Parse(
      "type: 'SGD' base_lr: 0.1 lr_policy: 'fixed' random_seed: 5 display: 0 "
      "snapshot_after_train: false max_iter: " +
      std::to_string(max_iter) +
      " net_param { name: 'hand' "
      "layer { name: 'data' type: 'DummyData' top: 'x' top: 't' dummy_data_param { "
      "  shape { dim: 1 dim: 1 } shape { dim: 1 dim: 1 } "
      "  data_filler { type: 'constant' value: 1 } data_filler { type: 'constant' value: 2 } } } "
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y' inner_product_param { "
      "  num_output: 1 bias_term: false weight_filler { type: 'constant' value: 0.5 } } } "
      "layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' } }");
}

TEST(TrainerSessionTest, TheGradientHookRunsWithOneDevice) {
  Trainer plain(HandSolver(1), {Device::Cpu()});
  plain.Solve();
  EXPECT_FLOAT_EQ(Weights(*plain.root())[0][0], 0.65f);

  Trainer hooked(HandSolver(1), {Device::Cpu()});
  std::vector<float> seen;
  hooked.set_gradient_hook([&seen](const std::vector<DeviceBuffer>& gradients) {
    ASSERT_EQ(gradients.size(), 1u);
    ASSERT_EQ(gradients[0].count, 1);
    seen.push_back(gradients[0].data[0]);
    gradients[0].data[0] *= 0.5f;
  });
  hooked.Solve();
  EXPECT_EQ(seen, std::vector<float>{-1.5f});
  EXPECT_FLOAT_EQ(Weights(*hooked.root())[0][0], 0.575f);
}

TEST(TrainerSessionTest, TheGradientHookSeesTheReplicasMeanAndEveryReplicaItsResult) {
  Trainer two(HandSolver(2), {Device::Cpu(), Device::Cpu()});
  int calls = 0;
  two.set_gradient_hook([&calls](const std::vector<DeviceBuffer>& gradients) {
    ++calls;
    gradients[0].data[0] *= 0.5f;  // both replicas see -1.5 first: their mean is -1.5
  });
  two.Solve();
  EXPECT_EQ(calls, 2);  // once per iteration, on root
  // w1 = 0.5 + 0.1 * 0.75 = 0.575; w2 = 0.575 + 0.1 * 0.5 * (2 - 0.575) = 0.64625.
  EXPECT_FLOAT_EQ(Weights(*two.root())[0][0], 0.64625f);
  EXPECT_EQ(Weights(*two.root()), Weights(*two.replica(1)));
}

TEST(TrainerSessionTest, StateBytesEqualTheSnapshotFilesBitForBit) {
  TempDir dir;
  const std::string db = WriteDb(dir, 10);
  const std::string prefix = dir / "snap";
  Trainer trainer(DataSolver(db, 2, 3, "snapshot_prefix: '" + prefix + "'"), {Device::Cpu()});
  trainer.Solve();
  trainer.root()->Snapshot();
  const std::string model_file = prefix + "_iter_3.caffemodel";
  EXPECT_EQ(trainer.ModelBytes(), io::ReadFile(model_file));
  EXPECT_EQ(trainer.StateBytes(model_file), io::ReadFile(prefix + "_iter_3.solverstate"));

  // Restoring the bytes equals restoring the files.
  Trainer from_files(DataSolver(db, 2, 6), {Device::Cpu()});
  from_files.root()->Restore(prefix + "_iter_3.solverstate");
  Trainer from_bytes(DataSolver(db, 2, 6), {Device::Cpu()});
  const std::string state = trainer.StateBytes("unused.caffemodel");
  from_bytes.Restore(trainer.ModelBytes(), &state, "bytes");
  EXPECT_EQ(from_bytes.root()->iter(), 3);
  EXPECT_EQ(from_bytes.ModelBytes(), from_files.ModelBytes());
  EXPECT_EQ(from_bytes.StateBytes("x"), from_files.StateBytes("x"));
  // And both continue as the uninterrupted run would.
  Trainer straight(DataSolver(db, 2, 6), {Device::Cpu()});
  straight.Solve();
  from_bytes.Solve();
  EXPECT_EQ(Weights(*from_bytes.root()), Weights(*straight.root()));
}

TEST(TrainerSessionTest, EventsFollowCaffesCadence) {
  TempDir dir;
  const std::string db = WriteDb(dir, 10);
  caffe::SolverParameter param = DataSolver(
      db, 2, 7,
      "snapshot: 3 test_iter: 1 test_interval: 4 snapshot_prefix: '" + (dir / "lenet") + "'");
  param.set_display(2);
  param.set_snapshot_after_train(true);
  Trainer trainer(param, {Device::Cpu()});
  std::vector<int> displays, tests;
  std::vector<std::pair<int, std::string>> snapshots;
  trainer.set_on_display([&](const Display& d) {
    displays.push_back(d.iter);
    EXPECT_GT(d.loss, 0.0f);
    EXPECT_FLOAT_EQ(d.learning_rate, 0.05f);
  });
  trainer.set_on_test([&](int iter) {
    tests.push_back(iter);
    EXPECT_EQ(trainer.root()->TestOutputNames(), std::vector<std::string>{"0/loss"});
    EXPECT_EQ(trainer.root()->TestScores().size(), 1u);
  });
  trainer.set_snapshot_sink([&](int iter, const std::string& model, const std::string& state) {
    caffe::SolverState parsed;
    ASSERT_TRUE(parsed.ParseFromString(state));
    EXPECT_EQ(parsed.iter(), iter);
    EXPECT_FALSE(model.empty());
    snapshots.emplace_back(iter, parsed.learned_net());
  });
  trainer.Solve();
  // Display at 0, 2, 4, 6 and the closing one (7 is not a multiple of 2: none).
  EXPECT_EQ(displays, (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(tests, (std::vector<int>{0, 4}));
  EXPECT_EQ(snapshots, (std::vector<std::pair<int, std::string>>{{3, "lenet_iter_3.caffemodel"},
                                                                 {6, "lenet_iter_6.caffemodel"},
                                                                 {7, "lenet_iter_7.caffemodel"}}));
  // A sink means no files.
  EXPECT_FALSE(std::filesystem::exists(dir / "lenet_iter_3.caffemodel"));
}

// CoSData (batch 2: x [2, 3], t [2, 1]) -> InnerProduct -> EuclideanLoss, and a TEST net
// reading its own CoSData layer.
caffe::SolverParameter FeedSolver(int batch, int max_iter, const std::string& extra = "") {
  const std::string cos =
      "type: 'CoSData' top: 'x' top: 't' cos_data_param { batch_size: " + std::to_string(batch) +
      " top { name: 'x' type: FLOAT_ARRAY channels: 3 sample_num_axes: 1 } "
      "  top { name: 't' type: FLOAT channels: 1 sample_num_axes: 1 } } ";
  return Parse(
      "type: 'SGD' base_lr: 0.1 lr_policy: 'fixed' random_seed: 9 display: 0 "
      "snapshot_after_train: false max_iter: " +
      std::to_string(max_iter) + " " + extra +
      " net_param { name: 'fed' "
      "layer { name: 'data' " +
      cos + " include { phase: TRAIN } } " + "layer { name: 'data' " + cos +
      " include { phase: TEST } } "
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'x' top: 'y' inner_product_param { "
      "  num_output: 1 weight_filler { type: 'gaussian' std: 0.5 } } } "
      "layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' top: 'loss' } }");
}

// Sample i: x = (sin i, cos i, i / 10), t = i / 20.
void PushSamples(BatchFeed& feed, int first, int count) {
  std::vector<float> x, t;
  for (int i = first; i < first + count; ++i) {
    x.insert(x.end(), {std::sin(static_cast<float>(i)), std::cos(static_cast<float>(i)),
                       static_cast<float>(i) / 10});
    t.push_back(static_cast<float>(i) / 20);
  }
  feed.Push({x.data(), t.data()}, {x.size(), t.size()});
}

TEST(TrainerSessionTest, EachReplicaIsFedItsOwnBatchesAndTwoTrainLikeOne) {
  // One replica with batch 4 taking samples 8k..8k+3 and 8k+4..8k+7 as two batches of 4 is
  // not the same; instead: one replica, batch 4, batch k = samples 4k..4k+3; two replicas,
  // batch 2, replica 0 gets samples 4k, 4k+1 and replica 1 gets 4k+2, 4k+3.
  const int steps = 5;
  Trainer one(FeedSolver(4, steps), {Device::Cpu()});
  caffe::NetParameter initial;
  one.root()->net()->ToProto(&initial);
  Trainer two(FeedSolver(2, steps), {Device::Cpu(), Device::Cpu()});
  two.root()->net()->CopyTrainedLayersFrom(initial);
  EXPECT_EQ(two.FeedLayers(0), (std::vector<std::string>{"TRAIN/data"}));
  EXPECT_EQ(two.FeedLayers(1), (std::vector<std::string>{"TRAIN/data"}));
  std::shared_ptr<BatchFeed> feed0 = two.Feed(0, "data"), feed1 = two.Feed(1, "TRAIN/data");
  EXPECT_NE(feed0, feed1);
  std::thread pusher0([&] {
    for (int k = 0; k < steps; ++k) PushSamples(*feed0, 4 * k, 2);
  });
  std::thread pusher1([&] {
    for (int k = 0; k < steps; ++k) PushSamples(*feed1, 4 * k + 2, 2);
  });
  std::thread pusher([&] {
    std::shared_ptr<BatchFeed> feed = one.Feed(0, "data");
    for (int k = 0; k < steps; ++k) PushSamples(*feed, 4 * k, 4);
  });
  two.Solve();
  one.Solve();
  pusher0.join();
  pusher1.join();
  pusher.join();
  EXPECT_EQ(feed0->pushed(), steps);
  EXPECT_EQ(feed1->pushed(), steps);
  ExpectClose(Weights(*one.root()), Weights(*two.root()), 1e-5f);
  EXPECT_EQ(Weights(*two.root()), Weights(*two.replica(1)));
}

TEST(TrainerSessionTest, FeedsAreFoundByPhaseAndUnknownOnesListed) {
  Trainer trainer(FeedSolver(2, 1, "test_iter: 1 test_interval: 10"), {Device::Cpu()});
  EXPECT_EQ(trainer.FeedLayers(0), (std::vector<std::string>{"TEST/data", "TRAIN/data"}));
  EXPECT_NE(trainer.Feed(0, "TEST/data"), trainer.Feed(0, "data"));
  EXPECT_EQ(trainer.Feed(0, "TRAIN/data"), trainer.Feed(0, "data"));
  const std::string message = Message([&] { trainer.Feed(0, "images"); });
  EXPECT_NE(message.find("feed layers: TEST/data, TRAIN/data"), std::string::npos) << message;
  EXPECT_NE(Message([&] { trainer.Feed(3, "data"); }).find("replica 3"), std::string::npos);
}

TEST(TrainerSessionTest, AbortFromAnotherThreadStopsTrainingWaitingOnItsFeed) {
  for (int replicas : {1, 2}) {
    SCOPED_TRACE(std::to_string(replicas) + " replica(s)");
    Trainer trainer(FeedSolver(2, 1000), std::vector<Device>(replicas, Device::Cpu()));
    std::shared_ptr<BatchFeed> feed = trainer.Feed(0, "data");
    PushSamples(*feed, 0, 2);  // one batch, then nothing: the next forward waits
    std::thread aborter([&] {
      while (feed->queued() > 0) std::this_thread::yield();
      trainer.Abort("the Spark task was killed");
    });
    try {
      trainer.Solve();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
      EXPECT_NE(std::string(e.what()).find("the Spark task was killed"), std::string::npos)
          << e.what();
    }
    aborter.join();
    EXPECT_THROW(trainer.Step(1), Error);
    EXPECT_THROW(PushSamples(*feed, 2, 2), Error);
  }
}

}  // namespace
}  // namespace cortado
