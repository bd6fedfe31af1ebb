// SPDX-License-Identifier: Apache-2.0
// Reading training logs: BVLC Caffe's (glog), Cortado's (spdlog with glog's prefix), the Spark
// API's (log4j), lines with no prefix; times across midnight and New Year; the errors.
#include "plot/training_log.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.hpp"
#include "solvers/tiny_problem.hpp"

namespace cortado::plot {
namespace {

// What BVLC Caffe's `caffe train` writes, cut down: two test nets, the loss suffix, an lr line
// after each display, a NaN loss, and lines that are none of these.
const char kCaffeLog[] = R"(Log file created at: 2016/11/26 03:08:49
I1126 03:08:50.000000 12345 caffe.cpp:217] Using GPUs 0
I1126 03:08:50.100000 12345 solver.cpp:48] Initializing solver from parameters:
test_iter: 100
I1126 03:08:56.000000 12345 solver.cpp:280] Learning Rate Policy: inv
I1126 03:08:57.000000 12345 solver.cpp:337] Iteration 0, Testing net (#0)
I1126 03:08:57.500000 12345 solver.cpp:404]     Test net output #0: accuracy = 0.0832
I1126 03:08:57.500000 12345 solver.cpp:404]     Test net output #1: loss = 2.30259 (* 1 = 2.30259 loss)
I1126 03:08:57.600000 12345 solver.cpp:337] Iteration 0, Testing net (#1)
I1126 03:08:57.700000 12345 solver.cpp:404]     Test net output #0: accuracy = 0.1
I1126 03:08:57.750000 12345 solver.cpp:228] Iteration 0, loss = 2.31
I1126 03:08:57.750000 12345 solver.cpp:244]     Train net output #0: loss = 2.31 (* 1 = 2.31 loss)
I1126 03:08:57.760000 12345 sgd_solver.cpp:106] Iteration 0, lr = 0.01
I1126 03:09:07.750000 12345 solver.cpp:218] Iteration 100 (10 iter/s, 10s/100 iters), loss = 0.25
I1126 03:09:07.750000 12345 solver.cpp:237]     Train net output #0: loss = 0.25 (* 1 = 0.25 loss)
I1126 03:09:07.760000 12345 sgd_solver.cpp:105] Iteration 100, lr = 0.00992565
W1126 03:09:08.000000 12345 net.cpp:100] MultiStep Status: Iteration 100, step = 1
I1126 03:09:17.750000 12345 solver.cpp:218] Iteration 200 (10 iter/s, 10s/100 iters), loss = -nan
I1126 03:09:17.760000 12345 sgd_solver.cpp:105] Iteration 200, lr = 1e-05
I1126 03:09:18.000000 12345 solver.cpp:337] Iteration 200, Testing net (#0)
I1126 03:09:18.250000 12345 solver.cpp:404]     Test net output #0: accuracy = 0.9
I1126 03:09:18.250000 12345 solver.cpp:404]     Test net output #1: loss = inf (* 1 = inf loss)
I1126 03:09:19.000000 12345 solver.cpp:449] Optimization Done.
)";

TEST(TrainingLogTest, ReadsCaffeLog) {
  const TrainingLog log = ParseTrainingLog(kCaffeLog, "caffe.log");
  EXPECT_EQ(log.source, "caffe.log");
  EXPECT_TRUE(log.has_time);
  ASSERT_EQ(log.train.size(), 3u);
  // Time 0 is the first record: the test pass at 03:08:57.
  EXPECT_EQ(log.train[0].iteration, 0);
  EXPECT_NEAR(log.train[0].seconds, 0.75, 1e-6);
  EXPECT_DOUBLE_EQ(log.train[0].loss, 2.31);
  EXPECT_DOUBLE_EQ(log.train[0].lr, 0.01);
  ASSERT_EQ(log.train[0].outputs.size(), 1u);
  EXPECT_EQ(log.train[0].outputs[0].name, "loss");
  EXPECT_TRUE(log.train[0].outputs[0].is_loss);
  EXPECT_EQ(log.train[1].iteration, 100);
  EXPECT_NEAR(log.train[1].seconds, 10.75, 1e-6);
  EXPECT_DOUBLE_EQ(log.train[1].loss, 0.25);
  EXPECT_DOUBLE_EQ(log.train[1].lr, 0.00992565);
  EXPECT_EQ(log.train[2].iteration, 200);
  EXPECT_TRUE(log.train[2].has_loss);
  EXPECT_TRUE(std::isnan(log.train[2].loss));
  EXPECT_DOUBLE_EQ(log.train[2].lr, 1e-05);

  ASSERT_EQ(log.tests.size(), 3u);
  EXPECT_EQ(log.tests[0].iteration, 0);
  EXPECT_EQ(log.tests[0].net, 0);
  EXPECT_DOUBLE_EQ(log.tests[0].seconds, 0.0);
  ASSERT_EQ(log.tests[0].outputs.size(), 2u);
  EXPECT_EQ(log.tests[0].outputs[0].name, "accuracy");
  EXPECT_DOUBLE_EQ(log.tests[0].outputs[0].value, 0.0832);
  EXPECT_FALSE(log.tests[0].outputs[0].is_loss);
  EXPECT_EQ(log.tests[0].outputs[1].name, "loss");
  EXPECT_DOUBLE_EQ(log.tests[0].outputs[1].value, 2.30259);
  EXPECT_TRUE(log.tests[0].outputs[1].is_loss);
  EXPECT_EQ(log.tests[1].net, 1);
  EXPECT_EQ(log.tests[1].iteration, 0);
  ASSERT_EQ(log.tests[1].outputs.size(), 1u);
  EXPECT_DOUBLE_EQ(log.tests[1].outputs[0].value, 0.1);
  EXPECT_EQ(log.tests[2].iteration, 200);
  EXPECT_NEAR(log.tests[2].seconds, 21.0, 1e-6);
  ASSERT_EQ(log.tests[2].outputs.size(), 2u);
  EXPECT_TRUE(std::isinf(log.tests[2].outputs[1].value));
}

// `cortado train`'s lines (solver.cpp's wording behind spdlog's pattern, thread ids as spdlog
// prints them), and the closing display without speed.
TEST(TrainingLogTest, ReadsCortadoLog) {
  const char text[] =
      "I0305 10:00:00.000100 30346 solver.cpp:442] Iteration 0, Testing net (#0)\n"
      "I0305 10:00:00.002100 30346 solver.cpp:488]     Test net output #0: loss = 0.977486 "
      "(* 1 = 0.977486 loss)\n"
      "I0305 10:00:00.002300 30346 solver.cpp:358] Iteration 0 (0 iter/s, 0.0021978s/2 iters), "
      "loss = 0.862436\n"
      "I0305 10:00:00.002300 30346 solver.cpp:373]     Train net output #0: loss = 0.862436 "
      "(* 1 = 0.862436 loss)\n"
      "I0305 10:00:00.002400 30346 solver.cpp:546] Iteration 0, lr = 0.01\n"
      "I0305 10:00:01.502300 30346 solver.cpp:358] Iteration 2 (1.33 iter/s, 1.5s/2 iters), "
      "loss = 1.02502\n"
      "I0305 10:00:01.502400 30346 solver.cpp:546] Iteration 2, lr = 0.001\n"
      "I0305 10:00:02.000100 30346 solver.cpp:305] Iteration 4, loss = 0.5\n";
  const TrainingLog log = ParseTrainingLog(text, "cortado.log");
  ASSERT_EQ(log.train.size(), 3u);
  EXPECT_DOUBLE_EQ(log.train[0].loss, 0.862436);
  EXPECT_NEAR(log.train[0].seconds, 0.0022, 1e-6);  // the stamps' resolution
  EXPECT_DOUBLE_EQ(log.train[1].lr, 0.001);
  EXPECT_NEAR(log.train[1].seconds, 1.5022, 1e-6);
  EXPECT_EQ(log.train[2].iteration, 4);
  EXPECT_DOUBLE_EQ(log.train[2].loss, 0.5);
  EXPECT_TRUE(std::isnan(log.train[2].lr));
  ASSERT_EQ(log.tests.size(), 1u);
  EXPECT_DOUBLE_EQ(log.tests[0].outputs[0].value, 0.977486);
}

// The Spark API's lines (Progress.scala logLines) through log4j's pattern, with images/s.
TEST(TrainingLogTest, ReadsSparkLog) {
  const char text[] =
      "24/12/31 23:59:50 INFO Cortado: Iteration 0, Testing net (#0)\n"
      "24/12/31 23:59:50 INFO Cortado:     Test net output #0: accuracy = 0.1\n"
      "24/12/31 23:59:55 INFO Cortado: Iteration 20 (4.000 iter/s, 5.000s/20 iters, 256.0 "
      "images/s), loss = 0.75\n"
      "24/12/31 23:59:55 INFO Cortado: Iteration 20, lr = 0.05\n"
      "25/01/01 00:00:10 INFO Cortado: Iteration 40 (1.000 iter/s, 20.00s/20 iters, 64.0 "
      "images/s), loss = 0.5\n"
      "25/01/01 00:00:10 INFO Cortado: Iteration 40, lr = 0.05\n";
  const TrainingLog log = ParseTrainingLog(text, "driver.log");
  ASSERT_EQ(log.train.size(), 2u);
  EXPECT_DOUBLE_EQ(log.train[0].loss, 0.75);
  EXPECT_DOUBLE_EQ(log.train[0].lr, 0.05);
  EXPECT_DOUBLE_EQ(log.train[0].seconds, 5.0);
  EXPECT_DOUBLE_EQ(log.train[1].seconds, 20.0);  // across New Year, the year in the stamp
  ASSERT_EQ(log.tests.size(), 1u);
  EXPECT_EQ(log.tests[0].outputs[0].name, "accuracy");
}

TEST(TrainingLogTest, ReadsLinesWithoutPrefixAndWithoutTime) {
  const char text[] =
      "Iteration 10, loss = 1.5\r\n"
      "Iteration 10, lr = 0.1\r\n"
      "some other line\r\n"
      "    Test net output #0: accuracy = 0.5\r\n"
      "Iteration 20, loss = 1.25";  // no newline at the end
  const TrainingLog log = ParseTrainingLog(text, "plain.log");
  EXPECT_FALSE(log.has_time);
  ASSERT_EQ(log.train.size(), 2u);
  EXPECT_TRUE(std::isnan(log.train[0].seconds));
  EXPECT_DOUBLE_EQ(log.train[0].lr, 0.1);
  EXPECT_DOUBLE_EQ(log.train[1].loss, 1.25);
  // Outputs with no "Testing net" line: at the last iteration seen, as parse_log.py does.
  ASSERT_EQ(log.tests.size(), 1u);
  EXPECT_EQ(log.tests[0].iteration, 10);
  EXPECT_DOUBLE_EQ(log.tests[0].outputs[0].value, 0.5);
}

// glog stamps have no year: midnight moves to the next day, and 31 December to 1 January to
// the next year, not 364 days back.
TEST(TrainingLogTest, TimeGoesOnAcrossMidnightAndNewYear) {
  const char text[] =
      "I1126 23:59:58.500000 1 solver.cpp:218] Iteration 0, loss = 3\n"
      "I1127 00:00:01.500000 1 solver.cpp:218] Iteration 10, loss = 2\n"
      "I1231 23:59:59.000000 1 solver.cpp:218] Iteration 20, loss = 1\n"
      "I0101 00:00:04.000000 1 solver.cpp:218] Iteration 30, loss = 0.5\n";
  const TrainingLog log = ParseTrainingLog(text, "long.log");
  ASSERT_EQ(log.train.size(), 4u);
  EXPECT_DOUBLE_EQ(log.train[1].seconds, 3.0);
  // 26 Nov 23:59:58.5 to 31 Dec 23:59:59: 35 days and 0.5 s.
  EXPECT_DOUBLE_EQ(log.train[2].seconds, 35 * 86400.0 + 0.5);
  EXPECT_DOUBLE_EQ(log.train[3].seconds, 35 * 86400.0 + 5.5);
}

TEST(TrainingLogTest, TextWithoutIterationsIsAnErrorNamingTheSource) {
  try {
    ParseTrainingLog("I1126 03:08:50.000000 1 caffe.cpp:217] Using GPUs 0\nhello\n", "notes.txt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    EXPECT_NE(std::string(e.what()).find(
                  "notes.txt has no training iterations: is it a Caffe training log?"),
              std::string::npos)
        << e.what();
  }
}

TEST(TrainingLogTest, MissingFileIsAnErrorNamingIt) {
  solver_testing::TempDir dir;
  const std::string path = dir / "absent.log";
  try {
    ReadTrainingLog(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(TrainingLogTest, ReadsAFile) {
  solver_testing::TempDir dir;
  std::ofstream(dir / "caffe.log") << kCaffeLog;
  const TrainingLog log = ReadTrainingLog(dir / "caffe.log");
  EXPECT_EQ(log.source, dir / "caffe.log");
  EXPECT_EQ(log.train.size(), 3u);
}

}  // namespace
}  // namespace cortado::plot
