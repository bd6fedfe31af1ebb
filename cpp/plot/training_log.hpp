// SPDX-License-Identifier: Apache-2.0
// Training curves read back from a training log: what BVLC Caffe's `caffe train` writes, what
// `cortado train` writes (the same lines behind spdlog's glog-like prefix), and what the Spark
// API logs through log4j. Caffe's tools/extra/parse_log.py is the reference for what is read.
//
// A line may start with a prefix that carries its time; three are understood, and a line with
// none is read all the same, without a time:
//   glog (Caffe, Cortado):  I1126 03:08:57.123456 12345 solver.cpp:218] ...
//                           (no year: a date earlier than the previous one by over 12 hours is
//                           taken to be in the next year, so a run across New Year stays in order)
//   log4j (Spark):          24/11/26 03:08:57 INFO Cortado: ...
//   ISO 8601:               2024-11-26 03:08:57,123 ... or [2024-11-26T03:08:57.123] ...
// The messages are found anywhere in the line, after the prefix:
//   Iteration 100 (10.5 iter/s, 9.5s/100 iters), loss = 0.2   a training record (smoothed loss)
//   Iteration 100, loss = 0.2                                 the same, older Caffe, or the
//                                                             closing display
//   Iteration 100, lr = 0.01                                  that record's learning rate
//       Train net output #0: loss = 0.2 (* 1 = 0.2 loss)      that record's outputs
//   Iteration 500, Testing net (#0)                           a test pass of test net 0
//       Test net output #1: loss = 0.05 (* 1 = 0.05 loss)     that pass's outputs
// Values may be nan or inf (Caffe prints them as nan, -nan, inf): they are kept as they are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cortado::plot {

// One named value of a net's output, as a "Train/Test net output #i: name = value" line gives it.
struct NamedValue {
  std::string name;
  double value = 0.0;
  // The line had Caffe's loss suffix "(* w = x loss)": the output is a loss of the net.
  bool is_loss = false;
};

// One display iteration of training. Absent values are NaN.
struct TrainRecord {
  int64_t iteration = 0;
  double seconds = 0.0;   // wall time since the log's first record (NaN: the line had no time)
  double loss = 0.0;      // the loss the display line shows (Caffe's average over average_loss)
  bool has_loss = false;  // a loss line was read (else loss is NaN: an lr line alone)
  double lr = 0.0;        // the learning rate of this iteration's update
  std::vector<NamedValue> outputs;  // the train net's outputs at this iteration
};

// One test pass of one test net.
struct TestRecord {
  int64_t iteration = 0;
  double seconds = 0.0;  // as TrainRecord::seconds
  int net = 0;           // the test net's index, the K of "Testing net (#K)"
  std::vector<NamedValue> outputs;
};

struct TrainingLog {
  std::string source;              // the name messages use (a path, or what the caller passed)
  std::vector<TrainRecord> train;  // in log order
  std::vector<TestRecord> tests;   // in log order
  bool has_time = false;           // some record had a time stamp
};

// Parses the text of a training log; `source` names it in messages. Lines it does not know are
// skipped. Throws cortado::Error kParse "<source> has no training iterations: is it a Caffe
// training log?" when no training record is found. Records are in the order of the log; time 0
// is the first record's (training or test) time.
TrainingLog ParseTrainingLog(const std::string& text, const std::string& source);

// Reads the file at `path` and parses it (ParseTrainingLog with source = path). kNotFound or kIo
// naming the path when it cannot be read.
TrainingLog ReadTrainingLog(const std::string& path);

}  // namespace cortado::plot
