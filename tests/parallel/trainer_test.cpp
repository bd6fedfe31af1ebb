// SPDX-License-Identifier: Apache-2.0
// The data-parallel Trainer. The multi-replica tests need a CUDA device and skip without one
// (two replicas on GPU 0 go through the device-copy path; the NCCL test needs two GPUs); the
// single-replica and argument tests run anywhere.
#include "parallel/trainer.hpp"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "data/base_data_layer.hpp"
#include "data/data_test_util.hpp"
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

TEST(TrainerTest, SeveralCpuReplicasAreRejected) {
  TempDir dir;
  try {
    Trainer trainer(DataSolver(WriteDb(dir, 10), 2, 4), {Device::Cpu(), Device::Cpu()});
    FAIL() << "no error";
  } catch (const Error& e) {
#if CORTADO_WITH_CUDA
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("needs CUDA devices"), std::string::npos) << e.what();
#else
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("no CUDA support"), std::string::npos) << e.what();
#endif
  }
}

TEST(TrainerTest, AMissingGpuIsNamed) {
  TempDir dir;
  const caffe::SolverParameter param = DataSolver(WriteDb(dir, 10), 2, 4);
  const std::string message = Message([&] {
    Trainer trainer(param, {Device::Cuda(97), Device::Cuda(97)});
  });
#if CORTADO_WITH_CUDA
  EXPECT_NE(message.find("CUDA device 97 requested, but this machine has"), std::string::npos)
      << message;
#else
  EXPECT_NE(message.find("no CUDA support"), std::string::npos) << message;
#endif
}

TEST(TrainerTest, NoDeviceIsAnError) {
  TempDir dir;
  EXPECT_THROW(Trainer(DataSolver(WriteDb(dir, 10), 2, 4), {}), Error);
}

// ---- one GPU --------------------------------------------------------------------------------

TEST(TrainerTest, TwoReplicasOnOneGpuTrainLikeOneWithTwiceTheBatch) {
  CORTADO_REQUIRE_GPU();
  TempDir dir;
  const std::string db = WriteDb(dir, 20);  // 6 steps of 4 samples wrap around
  Trainer one(DataSolver(db, 4, 6), {Device::Cuda(0)});
  caffe::NetParameter initial;
  one.root()->net()->ToProto(&initial);
  const auto initial_weights = Weights(*one.root());
  Trainer two(DataSolver(db, 2, 6), {Device::Cuda(0), Device::Cuda(0)});
  EXPECT_EQ(two.num_replicas(), 2);
  EXPECT_STREQ(two.sync_name(), "device copies");
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
  CORTADO_REQUIRE_GPU();
  TempDir dir;
  const std::string db = WriteDb(dir, 16);
  Trainer one(DataSolver(db, 3, 4, "iter_size: 2"), {Device::Cuda(0)});
  caffe::NetParameter initial;
  one.root()->net()->ToProto(&initial);
  Trainer three(DataSolver(db, 1, 4, "iter_size: 2"),
                {Device::Cuda(0), Device::Cuda(0), Device::Cuda(0)});
  three.root()->net()->CopyTrainedLayersFrom(initial);
  one.Solve();
  three.Solve();
  ExpectClose(Weights(*one.root()), Weights(*three.root()), 1e-4f);
  EXPECT_EQ(Weights(*three.root()), Weights(*three.replica(2)));
}

TEST(TrainerTest, RootWeightsReachEveryReplicaBeforeTraining) {
  CORTADO_REQUIRE_GPU();
  TempDir dir;
  Trainer trainer(DataSolver(WriteDb(dir, 10), 2, 0), {Device::Cuda(0), Device::Cuda(0)});
  for (Tensor* p : trainer.root()->net()->learnable_params()) {
    std::fill(p->mutable_cpu_data(), p->mutable_cpu_data() + p->count(), 0.25f);
  }
  trainer.Solve();
  for (const auto& values : Weights(*trainer.replica(1))) {
    for (float v : values) ASSERT_EQ(v, 0.25f);
  }
}

TEST(TrainerTest, AResumedRunRepeatsAnUninterruptedOne) {
  CORTADO_REQUIRE_GPU();
  TempDir dir;
  const std::string db = WriteDb(dir, 20);
  const std::string extra = "snapshot: 3 snapshot_prefix: '" + (dir / "snap") + "'";
  Trainer straight(DataSolver(db, 2, 6, extra), {Device::Cuda(0), Device::Cuda(0)});
  straight.Solve();
  ASSERT_TRUE(std::filesystem::exists(dir / "snap_iter_3.solverstate"));
  Trainer resumed(DataSolver(db, 2, 6, extra), {Device::Cuda(0), Device::Cuda(0)});
  resumed.Solve(dir / "snap_iter_3.solverstate");
  EXPECT_EQ(resumed.root()->iter(), 6);
  EXPECT_EQ(resumed.replica(1)->iter(), 6);
  ExpectClose(Weights(*straight.root()), Weights(*resumed.root()), 1e-6f);
  EXPECT_EQ(Weights(*resumed.root()), Weights(*resumed.replica(1)));
}

TEST(TrainerTest, AStopSeenByRootStopsEveryReplicaAtTheSameIteration) {
  CORTADO_REQUIRE_GPU();
  TempDir dir;
  Trainer trainer(DataSolver(WriteDb(dir, 10), 2, 20), {Device::Cuda(0), Device::Cuda(0)});
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

TEST(TrainerTest, ASnapshotRequestIsRootsAlone) {
  CORTADO_REQUIRE_GPU();
  TempDir dir;
  Trainer trainer(DataSolver(WriteDb(dir, 10), 2, 3, "snapshot_prefix: '" + (dir / "snap") + "'"),
                  {Device::Cuda(0), Device::Cuda(0)});
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
  CORTADO_REQUIRE_GPU();
  for (int failing : {1, 0}) {
    SCOPED_TRACE("failing replica " + std::to_string(failing));
    fail_at_source_batch.store(2 + failing);
    Trainer trainer(FailingSolver(10), {Device::Cuda(0), Device::Cuda(0)});
    try {
      trainer.Solve();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kIo) << message;
      EXPECT_NE(message.find("replica " + std::to_string(failing) + " on cuda:0"),
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
  Trainer one(DataSolver(db, 4, 6), {Device::Cuda(0)});
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

}  // namespace
}  // namespace cortado
