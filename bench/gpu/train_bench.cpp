// SPDX-License-Identifier: Apache-2.0
// Training throughput on a GPU: images per second of whole SGD iterations (forward, backward,
// momentum update) of a net whose data comes from Input layers filled once on the device, and
// the peak device memory Cortado allocated. bench/gpu/pytorch_train.py measures the same nets in
// PyTorch; bench/gpu/run.sh runs both and prints the ratios.
//
//   cortado_gpu_bench MODEL.prototxt [iterations=50] [warmup=10] [gpu=0]
// prints one line: "<name> batch <b> ms/iter <t> images/s <r> peak_MiB <m>".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cuda.hpp"
#include "core/logging.hpp"
#include "io/proto_io.hpp"
#include "math/gpu.hpp"
#include "solvers/solver.hpp"

namespace cortado {
namespace {

int Run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.prototxt [iterations] [warmup] [gpu]\n", argv[0]);
    return 2;
  }
  const std::string model = argv[1];
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 50;
  const int warmup = argc > 3 ? std::atoi(argv[3]) : 10;
  const int gpu = argc > 4 ? std::atoi(argv[4]) : 0;
  SetLogLevel("warn");

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
  param.set_solver_mode(caffe::SolverParameter::GPU);

  Context ctx(Device::Cuda(gpu), 1);
  std::unique_ptr<Solver> solver = CreateSolver(param, &ctx);
  Net* net = solver->net();
  Tensor* data = net->blob_by_name("data");
  Tensor* label = net->blob_by_name("label");
  math::gpu::RngUniform(ctx, data->count(), 0.0f, 1.0f, data->mutable_gpu_data());
  float* labels = label->mutable_cpu_data();
  for (int i = 0; i < label->count(); ++i) labels[i] = static_cast<float>(i % 10);
  label->gpu_data();

  solver->Step(warmup);
  CORTADO_CUDA_CHECK(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  solver->Step(iterations);
  CORTADO_CUDA_CHECK(cudaDeviceSynchronize());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int batch = data->shape(0);
  const double ms = 1000.0 * seconds / iterations;
  std::printf("%s batch %d ms/iter %.3f images/s %.1f peak_MiB %.1f loss %g\n", net->name().c_str(),
              batch, ms, batch * iterations / seconds,
              static_cast<double>(cuda::PeakAllocatedBytes()) / (1 << 20),
              static_cast<double>(solver->smoothed_loss()));
  return 0;
}

}  // namespace
}  // namespace cortado

int main(int argc, char** argv) {
  try {
    return cortado::Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cortado_gpu_bench: %s\n", e.what());
    return 1;
  }
}
