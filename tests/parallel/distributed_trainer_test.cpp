// SPDX-License-Identifier: Apache-2.0
// Training across processes: ranks as threads of this process, each with its own tcp
// communicator and trainer (as Spark's local[N] runs them). N ranks of batch b must train like
// one rank of batch N * b on the same records: the same loss at every iteration and the same
// weights, and every rank bit-identical to rank 0.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp_test_util.hpp"
#include "core/config.hpp"
#include "data/data_test_util.hpp"
#include "parallel/trainer.hpp"
#if CORTADO_WITH_UCX
#include "comm/ucx/ucx_communicator.hpp"
#endif

namespace cortado {
namespace {

using testing::TempDir;

// An LMDB of `n` 1 x 28 x 28 records with varied bytes; record i has label i % 10.
std::string WriteImages(const TempDir& dir, int n) {
  std::vector<std::pair<std::string, std::string>> records;
  for (int i = 0; i < n; ++i) {
    records.emplace_back(testing::Key(i),
                         testing::ByteDatum(1, 28, 28, (i * 53) % 256, i % 10).SerializeAsString());
  }
  const std::string path = dir / "images";
  testing::WriteLmdb(path, records);
  return path;
}

// Caffe's LeNet (examples/mnist/lenet_train_test.prototxt's layers) on `db`, SGD with momentum
// and weight decay; with `batch_norm`, a BatchNorm + Scale after each convolution.
caffe::SolverParameter LeNet(const std::string& db, int batch, int max_iter, bool batch_norm,
                             const std::string& extra = "") {
  const std::string bn1 =
      batch_norm ? "layer { name: 'bn1' type: 'BatchNorm' bottom: 'conv1' top: 'conv1' } "
                   "layer { name: 'sc1' type: 'Scale' bottom: 'conv1' top: 'conv1' "
                   "  scale_param { bias_term: true } } "
                 : "";
  const std::string bn2 =
      batch_norm ? "layer { name: 'bn2' type: 'BatchNorm' bottom: 'conv2' top: 'conv2' } "
                   "layer { name: 'sc2' type: 'Scale' bottom: 'conv2' top: 'conv2' "
                   "  scale_param { bias_term: true } } "
                 : "";
  const std::string text =
      "type: 'SGD' base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 lr_policy: 'inv' "
      "gamma: 0.0001 power: 0.75 random_seed: 1701 display: 1 average_loss: 1 "
      "snapshot_after_train: false max_iter: " +
      std::to_string(max_iter) + " " + extra +
      " net_param { name: 'LeNet' "
      "layer { name: 'mnist' type: 'Data' top: 'data' top: 'label' "
      "  transform_param { scale: 0.00390625 } "
      "  data_param { source: '" +
      db + "' backend: LMDB batch_size: " + std::to_string(batch) +
      " } } "
      "layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1' "
      "  param { lr_mult: 1 } param { lr_mult: 2 } "
      "  convolution_param { num_output: 20 kernel_size: 5 stride: 1 "
      "    weight_filler { type: 'xavier' } bias_filler { type: 'constant' } } } " +
      bn1 +
      "layer { name: 'pool1' type: 'Pooling' bottom: 'conv1' top: 'pool1' "
      "  pooling_param { pool: MAX kernel_size: 2 stride: 2 } } "
      "layer { name: 'conv2' type: 'Convolution' bottom: 'pool1' top: 'conv2' "
      "  param { lr_mult: 1 } param { lr_mult: 2 } "
      "  convolution_param { num_output: 50 kernel_size: 5 stride: 1 "
      "    weight_filler { type: 'xavier' } bias_filler { type: 'constant' } } } " +
      bn2 +
      "layer { name: 'pool2' type: 'Pooling' bottom: 'conv2' top: 'pool2' "
      "  pooling_param { pool: MAX kernel_size: 2 stride: 2 } } "
      "layer { name: 'ip1' type: 'InnerProduct' bottom: 'pool2' top: 'ip1' "
      "  param { lr_mult: 1 } param { lr_mult: 2 } "
      "  inner_product_param { num_output: 500 "
      "    weight_filler { type: 'xavier' } bias_filler { type: 'constant' } } } "
      "layer { name: 'relu1' type: 'ReLU' bottom: 'ip1' top: 'ip1' } "
      "layer { name: 'ip2' type: 'InnerProduct' bottom: 'ip1' top: 'ip2' "
      "  param { lr_mult: 1 } param { lr_mult: 2 } "
      "  inner_product_param { num_output: 10 "
      "    weight_filler { type: 'xavier' } bias_filler { type: 'constant' } } } "
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip2' bottom: 'label' top: 'loss' } "
      "}";
  caffe::SolverParameter param;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param)) << text;
  return param;
}

using Weights = std::vector<std::vector<float>>;

Weights ParamData(const Solver& solver) {
  Weights weights;
  for (const auto& p : solver.net()->params()) {
    weights.emplace_back(p->cpu_data(), p->cpu_data() + p->count());
  }
  return weights;
}

struct RunResult {
  std::vector<float> losses;   // rank 0's displayed loss at every iteration
  Weights weights;             // rank 0's parameters at the end
  std::vector<Weights> ranks;  // every rank's parameters at the end
  std::vector<int> iters;      // every rank's iteration at the end
  int num_buckets = 0;         // rank 0's
};

struct Ranks {
  int world = 1;
  std::string backend = "tcp";    // or "ucx"
  Device device = Device::Cpu();  // every rank's one replica
  ExchangeOptions exchange;
  std::function<void(int rank, Trainer*)> before;  // e.g. a callback, a resume
  std::function<void(int rank, Trainer*)> train = [](int, Trainer* t) { t->Solve(); };
};

// Trains `param` on `setup.world` ranks (threads, each a tcp communicator and a trainer).
// Exceptions are recorded per rank in `errors` when given, else fail the test.
RunResult Train(const caffe::SolverParameter& param, const Ranks& setup,
                std::vector<std::string>* errors = nullptr) {
  const int n = setup.world;
  testing::LoopbackRing ring(n);  // every rank's listener, open before any rank starts
  RunResult run;
  run.ranks.resize(n);
  run.iters.assign(n, -1);
  std::vector<std::string> failures(n);
  std::mutex mutex;
  auto body = [&](int rank) {
    try {
      TrainerOptions options;
      options.exchange = setup.exchange;
      if (n > 1) {
        comm::CommOptions comm_options = ring.Options(rank);
        comm_options.connect_timeout_s = 20;
        comm_options.timeout_s = 20;
        comm_options.chunk_bytes = size_t{1} << 18;
#if CORTADO_WITH_UCX
        if (setup.backend == "ucx") {
          options.comm = ring.JoinWith(comm_options, comm::CreateUcxCommunicator);
        }
#endif
        if (!options.comm) options.comm = ring.Join(comm_options);
        EXPECT_STREQ(options.comm->backend(), setup.backend.c_str());
      }
      Trainer trainer(param, {setup.device}, options);
      if (rank == 0) {
        trainer.set_on_display([&](const Display& d) {
          if (d.seconds >= 0) run.losses.push_back(d.loss);  // not the closing display
        });
        run.num_buckets = trainer.exchange() ? trainer.exchange()->num_buckets() : 0;
      }
      if (setup.before) setup.before(rank, &trainer);
      setup.train(rank, &trainer);
      std::lock_guard<std::mutex> lock(mutex);
      run.ranks[rank] = ParamData(*trainer.root());
      run.iters[rank] = trainer.root()->iter();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex);
      failures[rank] = e.what();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
  if (errors != nullptr) {
    *errors = failures;
  } else {
    for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  }
  run.weights = run.ranks[0];
  return run;
}

// |a - b| <= tolerance * max(|a|, |b|, floor) element by element.
void ExpectNear(const Weights& expected, const Weights& actual, float tolerance, float floor,
                const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].size(), actual[i].size()) << what << " parameter " << i;
    int failures = 0;
    for (size_t j = 0; j < expected[i].size() && failures < 5; ++j) {
      const float scale = std::max({std::fabs(expected[i][j]), std::fabs(actual[i][j]), floor});
      if (!(std::fabs(expected[i][j] - actual[i][j]) <= tolerance * scale)) {
        ++failures;
        ADD_FAILURE() << what << ": parameter " << i << " element " << j << ": expected "
                      << expected[i][j] << ", got " << actual[i][j];
      }
    }
  }
}

void ExpectSameLosses(const std::vector<float>& expected, const std::vector<float>& actual,
                      float tolerance) {
  ASSERT_EQ(expected.size(), actual.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(expected[i], actual[i], tolerance * std::fabs(expected[i])) << "iteration " << i;
  }
}

void ExpectRanksIdentical(const RunResult& run) {
  for (size_t r = 1; r < run.ranks.size(); ++r) {
    EXPECT_TRUE(run.ranks[r] == run.ranks[0]) << "rank " << r << " differs from rank 0";
    EXPECT_EQ(run.iters[r], run.iters[0]) << "rank " << r;
  }
}

// Float sums in another order: the gradient of a batch of N * b is one sum over N * b samples
// on one rank, but N sums of b samples added across ranks on N ranks. Both are the same in
// exact arithmetic; in float they differ in the last bits, and 20 SGD steps with momentum
// carry that difference into the weights at the 1e-6 level.
constexpr float kTolerance = 1e-5f;

// 2 and 3 ranks of batch b through `backend` against 1 rank of batch N * b on the same records.
void ExpectRanksTrainLeNetLikeOneRankWithTheWholeBatch(const std::string& backend) {
  TempDir dir;
  const std::string db = WriteImages(dir, 60);
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const int b = 4;
    const RunResult one = Train(LeNet(db, world * b, 20, false), Ranks{});
    Ranks setup;
    setup.world = world;
    setup.backend = backend;
    const RunResult many = Train(LeNet(db, b, 20, false), setup);
    ASSERT_EQ(one.losses.size(), 20u);
    ExpectSameLosses(one.losses, many.losses, kTolerance);
    ExpectNear(one.weights, many.weights, kTolerance, 1e-2f, "weights");
    ExpectRanksIdentical(many);
    EXPECT_EQ(many.iters[0], 20);
  }
}

TEST(DistributedTrainerTest, TwoAndThreeRanksTrainLeNetLikeOneRankWithTheWholeBatch) {
  ExpectRanksTrainLeNetLikeOneRankWithTheWholeBatch("tcp");
}

// Caffe's im2col + GEMM for the convolutions, for GPU runs compared bit for bit: cuDNN picks its
// algorithms by timing them, so two runs (on a GPU that is busy with other work) may sum in
// different orders.
caffe::SolverParameter WithCaffeConvolutions(caffe::SolverParameter param) {
  for (auto& layer : *param.mutable_net_param()->mutable_layer()) {
    if (layer.type() == "Convolution") {
      layer.mutable_convolution_param()->set_engine(caffe::ConvolutionParameter::CAFFE);
    }
  }
  return param;
}

#if CORTADO_WITH_UCX
TEST(DistributedTrainerTest, UcxRanksTrainLeNetLikeOneRankWithTheWholeBatch) {
  ExpectRanksTrainLeNetLikeOneRankWithTheWholeBatch("ucx");
}

// On GPUs the host backends exchange the gradients through page-locked staging memory: ucx ends
// where tcp does (the same ring, so the same sums).
TEST(DistributedTrainerTest, UcxRanksOnTheGpuTrainLikeTcpRanks) {
  if (Context::CudaDeviceCount() < 1) GTEST_SKIP() << "needs a CUDA device";
  TempDir dir;
  const std::string db = WriteImages(dir, 60);
  Ranks setup;
  setup.world = 2;
  setup.device = Device::Cuda(0);
  const caffe::SolverParameter param = WithCaffeConvolutions(LeNet(db, 4, 20, false));
  const RunResult tcp = Train(param, setup);
  setup.backend = "ucx";
  const RunResult ucx = Train(param, setup);
  ASSERT_EQ(tcp.losses.size(), 20u);
  ExpectSameLosses(tcp.losses, ucx.losses, kTolerance);
  ExpectNear(tcp.weights, ucx.weights, kTolerance, 1e-2f, "weights");
  ExpectRanksIdentical(ucx);
}
#endif

// Gradients on a 16-bit wire (--exchange_precision): half the bytes between the ranks, each
// sum rounded on the way, so the run follows the float32 one within the type's rounding; the
// ranks still end identical. Through the overlapped buckets and through the whole buffer.
// Three iterations: training amplifies any difference in the gradients (float32's own
// reordering, 1e-7, grows to 1e-5 in 20 iterations), so a longer run would compare that.
TEST(DistributedTrainerTest, GradientsOnASixteenBitWireTrainCloseToFloat32) {
  TempDir dir;
  const std::string db = WriteImages(dir, 60);
  Ranks setup;
  setup.world = 3;
  setup.exchange.wire = comm::WireType::kFloat32;
  constexpr int kIterations = 3;
  const RunResult exact = Train(LeNet(db, 4, kIterations, false), setup);
  for (comm::WireType wire : {comm::WireType::kBFloat16, comm::WireType::kFloat16}) {
    for (bool overlap : {true, false}) {
      SCOPED_TRACE(std::string(comm::WireTypeName(wire)) + (overlap ? ", buckets" : ", whole"));
      setup.exchange.wire = wire;
      setup.exchange.overlap = overlap;
      const RunResult run = Train(LeNet(db, 4, kIterations, false), setup);
      ASSERT_EQ(run.losses.size(), static_cast<size_t>(kIterations));
      ExpectSameLosses(exact.losses, run.losses, 1e-2f);
      ExpectNear(exact.weights, run.weights, 1e-2f, 1e-2f, "weights");
      EXPECT_FALSE(exact.weights == run.weights) << "the gradients did not travel rounded";
      ExpectRanksIdentical(run);
    }
  }
}

TEST(DistributedTrainerTest, BucketsOverlappedOrNotGiveTheSameWeights) {
  TempDir dir;
  const std::string db = WriteImages(dir, 40);
  Ranks whole;
  whole.world = 2;
  whole.exchange.overlap = false;
  Ranks buckets = whole;
  buckets.exchange.overlap = true;
  buckets.exchange.bucket_bytes = 64 << 10;  // ip1's weights alone are 1.6 MB
  const RunResult a = Train(LeNet(db, 3, 8, false), whole);
  const RunResult b = Train(LeNet(db, 3, 8, false), buckets);
  EXPECT_EQ(a.num_buckets, 0);
  EXPECT_GE(b.num_buckets, 4);
  // Two ranks add two numbers: the same sum whichever starts, so bit for bit.
  EXPECT_TRUE(a.weights == b.weights);
  ExpectRanksIdentical(b);
}

// On a GPU with overlap_gpu, buckets go to host memory as backward writes them and come back
// summed: the same weights as the whole buffer after backward, bit for bit (two ranks), and the
// ranks identical.
TEST(DistributedTrainerTest, BucketsOverlappedOnTheGpuGiveTheSameWeights) {
  if (Context::CudaDeviceCount() < 1) GTEST_SKIP() << "needs a CUDA device";
  TempDir dir;
  const std::string db = WriteImages(dir, 40);
  Ranks whole;
  whole.world = 2;
  whole.device = Device::Cuda(0);
  whole.exchange.overlap_gpu = false;
  Ranks buckets = whole;
  buckets.exchange.overlap_gpu = true;
  buckets.exchange.bucket_bytes = 64 << 10;
  const caffe::SolverParameter param = WithCaffeConvolutions(LeNet(db, 3, 8, false));
  const RunResult a = Train(param, whole);
  const RunResult b = Train(param, buckets);
  EXPECT_EQ(a.num_buckets, 0);
  EXPECT_GE(b.num_buckets, 4);
  EXPECT_TRUE(a.weights == b.weights);
  ExpectRanksIdentical(b);
}

TEST(DistributedTrainerTest, IterSizeAccumulatesBeforeTheExchange) {
  TempDir dir;
  const std::string db = WriteImages(dir, 48);
  const RunResult one = Train(LeNet(db, 6, 6, false, "iter_size: 2"), Ranks{});
  Ranks setup;
  setup.world = 3;
  setup.exchange.bucket_bytes = 128 << 10;
  const RunResult many = Train(LeNet(db, 2, 6, false, "iter_size: 2"), setup);
  ExpectSameLosses(one.losses, many.losses, kTolerance);
  ExpectNear(one.weights, many.weights, kTolerance, 1e-2f, "weights");
  ExpectRanksIdentical(many);
}

// BatchNorm normalises over the batch a rank sees: b samples on each of N ranks, N * b on one.
// So N ranks do not train like one with the whole batch (as with Caffe's multi-GPU training and
// PyTorch's DistributedDataParallel without SyncBatchNorm); the ranks still agree bit for bit,
// and training still learns.
TEST(DistributedTrainerTest, ANetWithBatchNormKeepsEveryRankIdentical) {
  TempDir dir;
  const std::string db = WriteImages(dir, 40);
  Ranks setup;
  setup.world = 2;
  // Step: Solve's closing display runs one more forward on rank 0 alone, which moves its
  // running statistics once more (as Caffe's does).
  setup.train = [](int, Trainer* t) { t->Step(20); };
  const RunResult many = Train(LeNet(db, 4, 20, true), setup);
  ExpectRanksIdentical(many);
  ASSERT_EQ(many.losses.size(), 20u);
  EXPECT_LT(many.losses.back(), many.losses.front());
}

TEST(DistributedTrainerTest, RankZerosWeightsAndStateReachEveryRank) {
  TempDir dir;
  const std::string db = WriteImages(dir, 40);
  const std::string extra = "snapshot: 4 snapshot_prefix: '" + (dir / "snap") + "'";
  Ranks setup;
  setup.world = 2;
  const RunResult straight = Train(LeNet(db, 2, 8, false, extra), setup);
  // Only rank 0 wrote snapshots.
  ASSERT_TRUE(std::filesystem::exists(dir / "snap_iter_4.solverstate"));
  // Resumed: rank 0 alone reads the file (rank 1 is given a path that does not exist).
  Ranks resumed = setup;
  resumed.train = [&](int rank, Trainer* t) {
    t->Solve(rank == 0 ? dir / "snap_iter_4.solverstate" : dir / "missing.solverstate");
  };
  const RunResult again = Train(LeNet(db, 2, 8, false, extra), resumed);
  ExpectRanksIdentical(again);
  EXPECT_EQ(again.iters[1], 8);
  ExpectNear(straight.weights, again.weights, 1e-6f, 1e-2f, "resumed weights");
}

TEST(DistributedTrainerTest, AStopOnAnyRankStopsEveryRankAfterTheSameIteration) {
  TempDir dir;
  const std::string db = WriteImages(dir, 40);
  Ranks setup;
  setup.world = 3;
  setup.before = [](int rank, Trainer* t) {
    if (rank != 2) return;
    t->set_action_callback(
        [t] { return t->root()->iter() >= 5 ? SolverAction::kStop : SolverAction::kNone; });
  };
  const RunResult run = Train(LeNet(db, 2, 30, false), setup);
  ExpectRanksIdentical(run);
  EXPECT_GE(run.iters[0], 5);
  EXPECT_LE(run.iters[0], 7);
}

TEST(DistributedTrainerTest, AnAbortedRankMakesTheOthersFailFast) {
  TempDir dir;
  const std::string db = WriteImages(dir, 40);
  Ranks setup;
  setup.world = 3;
  std::atomic<bool> aborted{false};
  setup.before = [&](int rank, Trainer* t) {
    if (rank != 1) return;
    t->set_action_callback([t, &aborted] {
      if (t->root()->iter() == 3 && !aborted.exchange(true)) t->Abort("the task was killed");
      return SolverAction::kNone;
    });
  };
  std::vector<std::string> errors;
  const auto start = std::chrono::steady_clock::now();
  Train(LeNet(db, 2, 1000, false), setup, &errors);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 15.0) << "the collective timeout is 20 s: the others must not wait for it";
  for (int r = 0; r < 3; ++r) EXPECT_NE(errors[r], "") << "rank " << r << " trained on";
  EXPECT_NE(errors[1].find("the task was killed"), std::string::npos) << errors[1];
}

// ---- under mpirun: the mpi backend -----------------------------------------------------------

// Run by the ctest entry that starts cortado_tests under `mpirun -np 3` (tests/comm); skipped
// elsewhere. Every rank trains LeNet with the mpi backend and, beside it, the one-rank reference
// of the whole batch; rank 0's result must match it, and every rank rank 0's.
TEST(MpiTrainerTest, RanksUnderMpirunTrainLeNetLikeOneRankWithTheWholeBatch) {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size == nullptr || std::atoi(size) < 2) GTEST_SKIP() << "runs under mpirun -np 2 or more";
  const std::vector<std::string> backends = comm::CommunicatorBackends();
  if (std::find(backends.begin(), backends.end(), "mpi") == backends.end()) {
    GTEST_SKIP() << "this build has no mpi backend";
  }
  comm::CommOptions options;
  options.backend = "mpi";
  options.world_size = std::atoi(size);
  options.rank = std::atoi(std::getenv("OMPI_COMM_WORLD_RANK"));
  options.timeout_s = 60;
  std::shared_ptr<comm::Communicator> comm = comm::CreateCommunicator(options);
  const int world = comm->size();
  // One database for all ranks: rank 0 writes it, the others wait at the barrier.
  const std::string path = "/tmp/cortado-mpi-trainer-" +
                           std::string(std::getenv("OMPI_COMM_WORLD_SIZE")) + "-" +
                           std::to_string(getppid());
  std::string db = path + "/images";
  if (comm->rank() == 0) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
    std::vector<std::pair<std::string, std::string>> records;
    for (int i = 0; i < 60; ++i) {
      records.emplace_back(
          testing::Key(i),
          testing::ByteDatum(1, 28, 28, (i * 53) % 256, i % 10).SerializeAsString());
    }
    testing::WriteLmdb(db, records);
  }
  comm->Barrier();
  const int b = 4;
  const RunResult one = Train(LeNet(db, world * b, 20, false), Ranks{});
  std::vector<float> losses;
  TrainerOptions trainer_options;
  trainer_options.comm = comm;
  Trainer trainer(LeNet(db, b, 20, false), {Device::Cpu()}, trainer_options);
  trainer.set_on_display([&](const Display& d) {
    if (d.seconds >= 0) losses.push_back(d.loss);
  });
  trainer.Solve();
  const Weights mine = ParamData(*trainer.root());
  // Every rank's weights, as bytes, for the comparison with rank 0's.
  std::string bytes;
  for (const auto& w : mine) {
    bytes.append(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
  }
  const std::vector<std::string> all = comm->AllGather(bytes);
  for (int r = 1; r < world; ++r) EXPECT_TRUE(all[r] == all[0]) << "rank " << r;
  if (comm->rank() == 0) {
    ExpectSameLosses(one.losses, losses, kTolerance);
    ExpectNear(one.weights, mine, kTolerance, 1e-2f, "weights");
  }
  comm->Barrier();
  if (comm->rank() == 0) std::filesystem::remove_all(path);
}

}  // namespace
}  // namespace cortado
