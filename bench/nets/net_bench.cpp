// SPDX-License-Identifier: Apache-2.0
// Forward+backward time of one training iteration of whole nets on the CPU, as `caffe time`
// measures it, once per convolution engine:
//   engine CAFFE    im2col + OpenBLAS GEMM (Caffe's own method: the baseline)
//   engine DEFAULT  the fastest Cortado has on this build (oneDNN when built with it)
// The ratio of the two rows of a net is the speed-up over Caffe's method on this machine.
//
//   build/bench/cortado_bench --benchmark_min_time=3
#include <benchmark/benchmark.h>

#include <string>

#include "core/context.hpp"
#include "core/logging.hpp"
#include "io/proto_io.hpp"
#include "math/math.hpp"
#include "net/net.hpp"
#include "net/net_options.hpp"

namespace cortado {
namespace {

void FillInputs(Net* net, int num_classes) {
  Rng rng(7);
  Tensor* data = net->blob_by_name("data");
  math::RngUniform(data->count(), 0.0f, 1.0f, rng, data->mutable_cpu_data());
  Tensor* label = net->blob_by_name("label");
  for (int i = 0; i < label->count(); ++i) {
    label->mutable_cpu_data()[i] = static_cast<float>(i % num_classes);
  }
}

void BM_NetForwardBackward(benchmark::State& state, const std::string& model,
                           caffe::ConvolutionParameter::Engine engine) {
  SetLogLevel("warn");
  caffe::NetParameter param =
      io::ReadNetParameterFromTextFile(std::string(CORTADO_BENCH_MODELS) + "/" + model);
  for (auto& layer : *param.mutable_layer()) {
    if (layer.type() == "Convolution") layer.mutable_convolution_param()->set_engine(engine);
  }
  param.mutable_state()->set_phase(caffe::TRAIN);
  Context ctx(Device::Cpu(), 1);
  Net net(param, &ctx, NetOptionsFromEnvironment());
  FillInputs(&net, 10);
  net.ForwardBackward();  // warm-up: first-touch allocations, oneDNN primitive creation
  for (auto _ : state) {
    benchmark::DoNotOptimize(net.ForwardBackward());
  }
  state.counters["threads"] = Context::NumThreads();
  state.SetLabel(model);
}

BENCHMARK_CAPTURE(BM_NetForwardBackward, lenet_b64_im2col, "lenet_train.prototxt",
                  caffe::ConvolutionParameter::CAFFE)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_NetForwardBackward, lenet_b64_default, "lenet_train.prototxt",
                  caffe::ConvolutionParameter::DEFAULT)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_NetForwardBackward, cifar10_quick_b100_im2col, "cifar10_quick_train.prototxt",
                  caffe::ConvolutionParameter::CAFFE)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_NetForwardBackward, cifar10_quick_b100_default, "cifar10_quick_train.prototxt",
                  caffe::ConvolutionParameter::DEFAULT)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace cortado

BENCHMARK_MAIN();
