// SPDX-License-Identifier: Apache-2.0
// The CPU threads the layers compute with: a context's count, given to each thread that makes
// the context current; OpenBLAS's one count kept in step with it; OpenMP's idle threads, which
// sleep soon (core/preload.cpp); a trainer's threads divided among its CPU replicas; and a run
// with more threads than cores, beside busy loops, that still finishes.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "core/context.hpp"
#include "math/math.hpp"
#include "parallel/trainer.hpp"

extern "C" int openblas_get_num_threads(void);

namespace cortado {
namespace {

int TeamSize() {
  int size = 0;
#pragma omp parallel
  {
#pragma omp single
    size = omp_get_num_threads();
  }
  return size;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(CpuThreadsTest, AThreadThatMakesAContextCurrentComputesWithItsThreads) {
  Context ctx(Device::Cpu());
  EXPECT_EQ(ctx.cpu_threads(), Context::NumThreads());
  for (int threads : {1, 3, 2}) {
    ctx.set_cpu_threads(threads);
    int team = 0;
    int blas = 0;
    std::thread([&] {
      ctx.MakeCurrent();
      team = TeamSize();
      blas = openblas_get_num_threads();
    }).join();
    EXPECT_EQ(team, threads);
    EXPECT_EQ(blas, threads);
  }
  EXPECT_THROW(ctx.set_cpu_threads(-1), Error);
}

TEST(CpuThreadsTest, OpenBlasComputesWithMoreThreadsAfterAOneThreadCaller) {
  // OpenBLAS's OpenMP build keeps one count for the process and, once a call left it at 1,
  // stays at 1 whatever the next caller's OpenMP setting: UseThreads sets it again.
  std::vector<float> a(64 * 64, 0.5f), c(64 * 64, 0.0f);
  std::thread([&] {
    omp_set_num_threads(1);
    math::Gemm(false, false, 64, 64, 64, 1.0f, a.data(), a.data(), 0.0f, c.data());
  }).join();
  Context::UseThreads(2);
  EXPECT_EQ(openblas_get_num_threads(), 2);
  EXPECT_EQ(omp_get_max_threads(), 2);
  EXPECT_FLOAT_EQ(c[0], 16.0f);
}

TEST(CpuThreadsTest, OpenMpIdleThreadsSleepSoon) {
  const std::string wait = Context::OpenMpWait();
  if (wait.find("set by Cortado") == std::string::npos) {
    GTEST_SKIP() << "the environment chose how OpenMP waits: " << wait;
  }
  // Set before libgomp read it: an idle thread sleeps at once rather than spinning 300,000
  // rounds (milliseconds). Forty 5 ms pauses after parallel regions of two threads: with the
  // default spin the idle thread's spinning costs most of each pause (1.3 s of CPU a second
  // paused, measured; 0.02 passive).
  ASSERT_NE(std::getenv("OMP_WAIT_POLICY"), nullptr);
  EXPECT_STREQ(std::getenv("OMP_WAIT_POLICY"), "passive");
  Context::UseThreads(2);
  ASSERT_EQ(TeamSize(), 2);
  const double cpu0 = CpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  double paused = 0;
  for (int round = 0; round < 40; ++round) {
    TeamSize();
    const auto pause = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    paused += Since(pause);
  }
  const double cpu = CpuSeconds() - cpu0;
  EXPECT_LT(cpu, 0.25 * paused) << cpu << " s of CPU in " << Since(start) << " s, " << paused
                                << " s of it paused";
}

caffe::SolverParameter ConvSolver(int max_iter) {
  caffe::SolverParameter param;
  const std::string text =
      "type: 'SGD' base_lr: 0.01 momentum: 0.9 lr_policy: 'fixed' random_seed: 5 display: 0 "
      "snapshot_after_train: false max_iter: " +
      std::to_string(max_iter) +
      " net_param { name: 'crowded' "
      "layer { name: 'data' type: 'DummyData' top: 'data' top: 'label' dummy_data_param { "
      "  shape { dim: 16 dim: 3 dim: 32 dim: 32 } shape { dim: 16 } "
      "  data_filler { type: 'gaussian' std: 1 } data_filler { type: 'constant' value: 1 } } } "
      "layer { name: 'conv' type: 'Convolution' bottom: 'data' top: 'conv' "
      "  convolution_param { num_output: 16 kernel_size: 5 pad: 2 "
      "                      weight_filler { type: 'gaussian' std: 0.05 } } } "
      "layer { name: 'relu' type: 'ReLU' bottom: 'conv' top: 'conv' } "
      "layer { name: 'pool' type: 'Pooling' bottom: 'conv' top: 'pool' "
      "  pooling_param { pool: MAX kernel_size: 2 stride: 2 } } "
      "layer { name: 'ip' type: 'InnerProduct' bottom: 'pool' top: 'ip' "
      "  inner_product_param { num_output: 4 weight_filler { type: 'gaussian' std: 0.01 } } } "
      "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip' bottom: 'label' top: 'loss' } }";
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param));
  return param;
}

TEST(CpuThreadsTest, ATrainerDividesItsThreadsAmongItsCpuReplicas) {
  TrainerOptions options;
  options.cpu_threads = 4;
  Trainer two(ConvSolver(1), {Device::Cpu(), Device::Cpu()}, options);
  EXPECT_EQ(two.cpu_threads_per_replica(), 2);
  two.set_cpu_threads(1);  // at least one each
  EXPECT_EQ(two.cpu_threads_per_replica(), 1);
  Trainer one(ConvSolver(1), {Device::Cpu()});
  EXPECT_EQ(one.cpu_threads_per_replica(), Context::NumThreads());
  one.set_cpu_threads(3);
  EXPECT_EQ(one.cpu_threads_per_replica(), 3);
}

// Not a timed test: a watchdog that fails the run only at 20 times the quiet time (and at least
// 10 s), where a collapse of spinning threads had it (8x and more, growing with the load).
TEST(CpuThreadsTest, MoreThreadsThanCoresBesideBusyLoopsStillFinish) {
  const int cores = std::max(1, omp_get_num_procs());
  const int iterations = 20;
  const auto timed = [&](int threads) {
    TrainerOptions options;
    options.cpu_threads = threads;
    Trainer trainer(ConvSolver(iterations), {Device::Cpu()}, options);
    const auto start = std::chrono::steady_clock::now();
    trainer.Solve();
    EXPECT_EQ(trainer.root()->iter(), iterations);
    return Since(start);
  };
  timed(cores);  // warm-up
  const double quiet = timed(cores);

  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < cores; ++i) {
    busy.emplace_back([&] {
      volatile uint64_t spins = 0;
      while (!stop.load(std::memory_order_relaxed)) spins = spins + 1;
    });
  }
  TrainerOptions options;
  options.cpu_threads = 4 * cores;
  Trainer crowded(ConvSolver(iterations), {Device::Cpu()}, options);
  const auto start = std::chrono::steady_clock::now();
  auto done = std::async(std::launch::async, [&] { crowded.Solve(); });
  const double limit = std::max(10.0, 20 * quiet);
  const bool finished =
      done.wait_for(std::chrono::duration<double>(limit)) == std::future_status::ready;
  if (!finished) crowded.Abort("the watchdog of CpuThreadsTest");
  try {
    done.get();
  } catch (const std::exception& e) {
    if (finished) ADD_FAILURE() << e.what();
  }
  const double took = Since(start);
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_TRUE(finished) << iterations << " iterations with " << 4 * cores << " threads on " << cores
                        << " cores beside " << cores << " busy loops took over " << limit
                        << " s; quiet: " << quiet << " s";
  RecordProperty("quiet_seconds", std::to_string(quiet));
  RecordProperty("crowded_seconds", std::to_string(took));
}

}  // namespace
}  // namespace cortado
