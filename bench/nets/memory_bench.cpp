// SPDX-License-Identifier: Apache-2.0
// Memory of one training iteration: builds an SGD solver (momentum, weight decay) for a net on
// the CPU, runs one
// iteration (forward, backward, update) and prints the most host memory its tensors held, with
// what the net's blobs and parameters account for. Tensors are laid out alike on the host and on
// a GPU, so this is also what a GPU run allocates for them (a GPU run adds cuDNN's workspace).
// CORTADO_FUSE=0 and CORTADO_SHARE_BUFFERS=0 turn off the two memory savings, for comparison
// (bench/nets/memory.sh runs all three).
//
//   cortado_memory_bench MODEL.prototxt [batch]
// prints one line: "<name> batch <b> peak_MiB <m> blob_data_MiB <d> blob_diff_MiB <g>
// params_MiB <p> other_MiB <o> ms <t>".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "bench_util.hpp"
#include "core/logging.hpp"
#include "core/synced_memory.hpp"
#include "math/math.hpp"
#include "net/net_options.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

double MiB(size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

int Run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.prototxt [batch]\n", argv[0]);
    return 2;
  }
  SetLogLevel("warn");
  caffe::SolverParameter param = bench::SgdSolver(argv[1]);
  if (argc > 2) {
    // A smaller (or larger) batch: the first dimension of every Input shape.
    const int batch = std::atoi(argv[2]);
    for (auto& layer : *param.mutable_net_param()->mutable_layer()) {
      if (layer.type() != "Input") continue;
      for (auto& shape : *layer.mutable_input_param()->mutable_shape()) shape.set_dim(0, batch);
    }
  }
  Context ctx(Device::Cpu(), 1);
  std::unique_ptr<Solver> solver = CreateSolver(param, &ctx, NetOptionsFromEnvironment());
  Net* net = solver->net();
  Rng rng(7);
  Tensor* data = net->blob_by_name("data");
  math::RngUniform(data->count(), 0.0f, 1.0f, rng, data->mutable_cpu_data());
  Tensor* label = net->blob_by_name("label");
  for (int i = 0; i < label->count(); ++i) label->mutable_cpu_data()[i] = i % 10;

  ResetHostPeakAllocatedBytes();
  const auto start = std::chrono::steady_clock::now();
  solver->Step(1);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  // What the net's blobs and parameters hold (each buffer once; a buffer never touched holds
  // nothing).
  std::set<SyncedMemory*> seen;
  auto held = [&](const std::shared_ptr<SyncedMemory>& m) -> size_t {
    if (!m || m->head() == SyncedMemory::Head::kUninitialized || !seen.insert(m.get()).second)
      return 0;
    return m->size();
  };
  size_t blob_data = 0, blob_diff = 0, params = 0;
  for (const auto& blob : net->blobs()) blob_data += held(blob->data());
  for (const auto& blob : net->blobs()) blob_diff += held(blob->diff());
  for (const auto& p : net->params()) params += held(p->data()) + held(p->diff());
  const size_t peak = HostPeakAllocatedBytes();
  std::printf(
      "%s batch %d peak_MiB %.1f blob_data_MiB %.1f blob_diff_MiB %.1f params_MiB %.1f "
      "other_MiB %.1f ms %.0f\n",
      net->name().c_str(), data->shape(0), MiB(peak), MiB(blob_data), MiB(blob_diff), MiB(params),
      MiB(HostAllocatedBytes() - blob_data - blob_diff - params), ms);
  return 0;
}

}  // namespace
}  // namespace cortado

int main(int argc, char** argv) {
  return cortado::bench::Main("cortado_memory_bench", [&] { return cortado::Run(argc, argv); });
}
