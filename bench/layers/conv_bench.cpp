// SPDX-License-Identifier: Apache-2.0
// Convolution layer passes on the CPU for the LeNet and CIFAR-10 quick shapes and MobileNet v1's
// depthwise convolutions (one group per channel), per engine:
// CAFFE (im2col + OpenBLAS GEMM, Caffe's method) and DEFAULT (oneDNN when built with it).
// Each pass is timed alone: forward, backward to the weights, backward to the input.
//
//   build/bench/cortado_bench --benchmark_filter=Conv
#include <benchmark/benchmark.h>

#include <string>

#include "core/context.hpp"
#include "core/logging.hpp"
#include "layers/layer.hpp"
#include "math/math.hpp"

namespace cortado {
namespace {

enum class Pass { kForward, kBackwardWeights, kBackwardData };

struct ConvBenchShape {
  int num, channels, size, num_output, kernel, pad;
  int group = 1, stride = 1;
};

void BM_Conv(benchmark::State& state, ConvBenchShape s, const char* engine, Pass pass) {
  SetLogLevel("warn");
  Context ctx(Device::Cpu(), 1);
  caffe::LayerParameter param;
  param.set_name("conv");
  param.set_type("Convolution");
  auto* p = param.mutable_convolution_param();
  p->set_num_output(s.num_output);
  p->add_kernel_size(s.kernel);
  p->add_pad(s.pad);
  p->add_stride(s.stride);
  p->set_group(s.group);
  p->mutable_weight_filler()->set_type("xavier");
  caffe::ConvolutionParameter::Engine e = caffe::ConvolutionParameter::DEFAULT;
  if (!caffe::ConvolutionParameter::Engine_Parse(engine, &e)) state.SkipWithError("bad engine");
  p->set_engine(e);
  auto layer = CreateLayer(param, &ctx);
  Tensor bottom({s.num, s.channels, s.size, s.size}), top;
  math::RngGaussian(bottom.count(), 0.0f, 1.0f, ctx.rng(), bottom.mutable_cpu_data());
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  math::RngGaussian(top.count(), 0.0f, 1.0f, ctx.rng(), top.mutable_cpu_diff());
  if (pass == Pass::kBackwardData) layer->set_param_propagate_down(0, false);
  if (pass == Pass::kBackwardData) layer->set_param_propagate_down(1, false);
  const std::vector<bool> down = {pass == Pass::kBackwardData};
  for (auto _ : state) {
    if (pass == Pass::kForward) {
      layer->Forward({&bottom}, {&top});
    } else {
      layer->Backward({&top}, down, {&bottom});
    }
  }
  state.counters["threads"] = Context::NumThreads();
}

#define CORTADO_CONV_BENCH(name, shape)                                                     \
  BENCHMARK_CAPTURE(BM_Conv, name##_fwd_im2col, shape, "CAFFE", Pass::kForward)             \
      ->Unit(benchmark::kMillisecond)                                                       \
      ->UseRealTime();                                                                      \
  BENCHMARK_CAPTURE(BM_Conv, name##_fwd_default, shape, "DEFAULT", Pass::kForward)          \
      ->Unit(benchmark::kMillisecond)                                                       \
      ->UseRealTime();                                                                      \
  BENCHMARK_CAPTURE(BM_Conv, name##_bwdw_im2col, shape, "CAFFE", Pass::kBackwardWeights)    \
      ->Unit(benchmark::kMillisecond)                                                       \
      ->UseRealTime();                                                                      \
  BENCHMARK_CAPTURE(BM_Conv, name##_bwdw_default, shape, "DEFAULT", Pass::kBackwardWeights) \
      ->Unit(benchmark::kMillisecond)                                                       \
      ->UseRealTime();                                                                      \
  BENCHMARK_CAPTURE(BM_Conv, name##_bwdd_im2col, shape, "CAFFE", Pass::kBackwardData)       \
      ->Unit(benchmark::kMillisecond)                                                       \
      ->UseRealTime();                                                                      \
  BENCHMARK_CAPTURE(BM_Conv, name##_bwdd_default, shape, "DEFAULT", Pass::kBackwardData)    \
      ->Unit(benchmark::kMillisecond)                                                       \
      ->UseRealTime()

const ConvBenchShape kLenetConv1{64, 1, 28, 20, 5, 0};
const ConvBenchShape kLenetConv2{64, 20, 12, 50, 5, 0};
const ConvBenchShape kCifarConv1{100, 3, 32, 32, 5, 2};
const ConvBenchShape kCifarConv2{100, 32, 16, 32, 5, 2};
const ConvBenchShape kCifarConv3{100, 32, 8, 64, 5, 2};

CORTADO_CONV_BENCH(ConvLenet1, kLenetConv1);
CORTADO_CONV_BENCH(ConvLenet2, kLenetConv2);
CORTADO_CONV_BENCH(ConvCifar1, kCifarConv1);
CORTADO_CONV_BENCH(ConvCifar2, kCifarConv2);
CORTADO_CONV_BENCH(ConvCifar3, kCifarConv3);

// MobileNet v1 (batch 8): conv2_1/dw, conv4_1/dw and the stride-2 conv5_6/dw.
const ConvBenchShape kMobileDw2{8, 32, 112, 32, 3, 1, 32, 1};
const ConvBenchShape kMobileDw4{8, 256, 28, 256, 3, 1, 256, 1};
const ConvBenchShape kMobileDw56{8, 512, 14, 512, 3, 1, 512, 2};

CORTADO_CONV_BENCH(ConvMobileDw2, kMobileDw2);
CORTADO_CONV_BENCH(ConvMobileDw4, kMobileDw4);
CORTADO_CONV_BENCH(ConvMobileDw56, kMobileDw56);

}  // namespace
}  // namespace cortado
