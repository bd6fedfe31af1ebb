// SPDX-License-Identifier: Apache-2.0
// What the plain (non-Google-Benchmark) bench programs share: the solver they train with and
// their main().
#pragma once

#include <cstdio>
#include <exception>
#include <string>

#include "io/proto_io.hpp"
#include "proto/caffe.pb.h"

namespace cortado::bench {

// SGD with momentum 0.9 and weight decay 0.0005 at a fixed rate, no display, no snapshots, a
// fixed seed, for the net in `model`.
inline caffe::SolverParameter SgdSolver(const std::string& model) {
  caffe::SolverParameter param;
  *param.mutable_net_param() = io::ReadNetParameterFromTextFile(model);
  param.set_type("SGD");
  param.set_base_lr(0.001f);
  param.set_lr_policy("fixed");
  param.set_momentum(0.9f);
  param.set_weight_decay(0.0005f);
  param.set_max_iter(1 << 30);
  param.set_display(0);
  param.set_snapshot_after_train(false);
  param.set_random_seed(1);
  return param;
}

// Runs `run`, turning an exception into a message on stderr and exit status 1.
template <typename Run>
int Main(const char* program, Run run) {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace cortado::bench
