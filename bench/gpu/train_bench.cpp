// SPDX-License-Identifier: Apache-2.0
// Training throughput on a GPU: images per second of whole SGD iterations (forward, backward,
// momentum update) of a net whose data comes from Input layers filled once on the device, and
// the peak device memory Cortado allocated. bench/gpu/pytorch_train.py measures the same nets in
// PyTorch; bench/gpu/run.sh runs both and prints the ratios.
//
//   cortado_gpu_bench MODEL.prototxt [iterations=50] [warmup=10] [gpu=0]
// prints one line: "<name> batch <b> ms/iter <t> images/s <r> peak_MiB <m>".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_util.hpp"
#include "core/cuda.hpp"
#include "core/logging.hpp"
#include "math/gpu.hpp"
#include "net/net_options.hpp"
#include "solvers/solver.hpp"
#include "tools/gpu_flag.hpp"

namespace cortado {
namespace {

int Run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: %s MODEL.prototxt [iterations] [warmup] [gpu] [float32|tf32|float16|bfloat16]\n",
        argv[0]);
    return 2;
  }
  const std::string model = argv[1];
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 50;
  const int warmup = argc > 3 ? std::atoi(argv[3]) : 10;
  const int gpu = argc > 4 ? std::atoi(argv[4]) : 0;
  const std::string precision = argc > 5 ? argv[5] : "float32";
  SetLogLevel("warn");

  caffe::SolverParameter param = bench::SgdSolver(model);
  param.set_solver_mode(caffe::SolverParameter::GPU);
  param.set_precision(tools::ParsePrecisionFlag(precision));

  Context ctx(Device::Cuda(gpu), 1);
  std::unique_ptr<Solver> solver = CreateSolver(param, &ctx, NetOptionsFromEnvironment());
  Net* net = solver->net();
  Tensor* data = net->blob_by_name("data");
  Tensor* label = net->blob_by_name("label");
  math::gpu::RngUniform(ctx, data->count(), 0.0f, 1.0f, data->mutable_gpu_data());
  float* labels = label->mutable_cpu_data();
  for (int i = 0; i < label->count(); ++i) labels[i] = static_cast<float>(i % 10);
  label->gpu_data();

  solver->Step(warmup);
  CORTADO_CUDA_CHECK(cudaDeviceSynchronize());
  // As PyTorch's peer measures: the peak of the timed iterations, after the warm-up (whose
  // cuDNN algorithm search borrows scratch memory once); the whole run's peak is printed too.
  const size_t setup_peak = cuda::PeakAllocatedBytes();
  cuda::ResetPeakAllocatedBytes();
  const auto start = std::chrono::steady_clock::now();
  solver->Step(iterations);
  CORTADO_CUDA_CHECK(cudaDeviceSynchronize());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int batch = data->shape(0);
  const double ms = 1000.0 * seconds / iterations;
  const size_t timed_peak = cuda::PeakAllocatedBytes();
  std::printf(
      "%s batch %d ms/iter %.3f images/s %.1f peak_MiB %.1f loss %g run_peak_MiB %.1f %s "
      "skipped %d\n",
      net->name().c_str(), batch, ms, batch * iterations / seconds,
      static_cast<double>(timed_peak) / (1 << 20), static_cast<double>(solver->smoothed_loss()),
      static_cast<double>(std::max(setup_peak, timed_peak)) / (1 << 20), precision.c_str(),
      solver->skipped_updates());
  return 0;
}

}  // namespace
}  // namespace cortado

int main(int argc, char** argv) {
  return cortado::bench::Main("cortado_gpu_bench", [&] { return cortado::Run(argc, argv); });
}
