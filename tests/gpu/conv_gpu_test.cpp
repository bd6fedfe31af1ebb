// SPDX-License-Identifier: Apache-2.0
// The GEMM-based and windowed layers on the GPU (InnerProduct, Convolution, Deconvolution,
// Pooling, LRN, BatchNorm) against their CPU passes, and their gradient checks there with the
// options of the CPU gradient tests in tests/layers/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"
#include "support/scoped_env.hpp"

namespace cortado::testing {
namespace {

// ---------------------------------------------------------------------------------------------
// InnerProduct

std::string IpText(int num_output, const std::string& extra = "") {
  return fmt::format(
      "name: 'ip' type: 'InnerProduct' inner_product_param {{ num_output: {} "
      "weight_filler {{ type: 'gaussian' std: 0.5 }} bias_filler {{ type: 'uniform' min: -1 "
      "max: 1 }} {} }}",
      num_output, extra);
}

TEST(InnerProductGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (const char* extra :
       {"", "transpose: true", "bias_term: false", "transpose: true bias_term: false", "axis: 2",
        "axis: -1 transpose: true"}) {
    SCOPED_TRACE(extra);
    CheckGpuMatchesCpu(LayerParam(IpText(7, extra)), {{3, 4, 5, 2}});
  }
}

TEST(InnerProductGpuTest, LargerMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.tolerance = 1e-3f;  // sums of hundreds of products, reordered
  CheckGpuMatchesCpu(LayerParam(IpText(100, "transpose: true")), {{64, 50, 4, 4}}, options);
  CheckGpuMatchesCpu(LayerParam(IpText(100)), {{64, 800}}, options);
}

TEST(InnerProductGpuTest, OnlyParameterGradients) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.propagate_down = {false};
  CheckGpuMatchesCpu(LayerParam(IpText(5)), {{4, 6}}, options);
}

TEST(InnerProductGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const char* extra : {"", "transpose: true", "bias_term: false"}) {
    SCOPED_TRACE(extra);
    Context ctx(Device::Cuda(0), 1701);
    auto layer = CreateLayer(LayerParam(IpText(4, extra)), &ctx);
    Tensor bottom({2, 3, 2, 2}), top;
    FillGaussian(&bottom);
    GradientChecker().Check(layer.get(), {&bottom}, {&top});
  }
}

// ---------------------------------------------------------------------------------------------
// Convolution and Deconvolution

struct ConvCase {
  const char* name;
  std::vector<int> bottom_shape;
  int num_output;
  int group;
  std::vector<int> kernel, stride, pad, dilation;  // one per spatial axis
  bool bias = true;
  bool force_nd = false;
  int axis = 1;
};

std::string Join(const char* field, const std::vector<int>& values) {
  std::string s;
  for (int v : values) s += fmt::format("{}: {} ", field, v);
  return s;
}

caffe::LayerParameter ConvParam(const char* type, const ConvCase& c,
                                const char* engine = "DEFAULT") {
  return LayerParam(fmt::format(
      "name: 'conv' type: '{}' convolution_param {{ num_output: {} group: {} bias_term: {} "
      "force_nd_im2col: {} axis: {} engine: {} {} {} {} {} "
      "weight_filler {{ type: 'gaussian' std: 0.5 }} bias_filler {{ type: 'gaussian' std: 0.5 }} "
      "}}",
      type, c.num_output, c.group, c.bias ? "true" : "false", c.force_nd ? "true" : "false", c.axis,
      engine, Join("kernel_size", c.kernel), Join("stride", c.stride), Join("pad", c.pad),
      Join("dilation", c.dilation)));
}

const std::vector<ConvCase>& ConvCases() {
  static const std::vector<ConvCase> cases = {
      {"basic", {2, 3, 5, 6}, 4, 1, {3, 3}, {1, 1}, {0, 0}, {1, 1}},
      {"group", {2, 4, 5, 5}, 6, 2, {3, 3}, {1, 1}, {1, 1}, {1, 1}},
      {"depthwise", {1, 3, 4, 4}, 3, 3, {2, 2}, {1, 1}, {0, 0}, {1, 1}},
      {"stride_pad_rect", {2, 3, 7, 6}, 2, 1, {3, 2}, {2, 3}, {1, 0}, {1, 1}},
      {"dilation", {1, 2, 7, 7}, 3, 1, {3, 3}, {1, 1}, {2, 2}, {2, 2}},
      {"no_bias", {2, 3, 5, 5}, 2, 1, {3, 3}, {2, 2}, {0, 0}, {1, 1}, false},
      {"one_by_one", {3, 4, 3, 3}, 5, 1, {1, 1}, {1, 1}, {0, 0}, {1, 1}},
      {"one_by_one_group", {2, 4, 3, 2}, 6, 2, {1, 1}, {1, 1}, {0, 0}, {1, 1}, false},
      {"force_nd", {2, 4, 6, 5}, 2, 2, {3, 2}, {2, 1}, {1, 1}, {1, 2}, true, true},
      {"three_d", {2, 2, 4, 5, 4}, 4, 2, {3, 2, 3}, {1, 2, 1}, {1, 0, 1}, {1, 1, 1}},
      {"three_d_dilated", {1, 2, 5, 5, 5}, 2, 1, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {2, 2, 2}},
      {"axis_2", {2, 2, 3, 5, 5}, 2, 1, {3, 3}, {1, 1}, {0, 0}, {1, 1}, true, false, 2},
  };
  return cases;
}

TEST(ConvolutionGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (const ConvCase& c : ConvCases()) {
    for (const char* engine : {"CAFFE", "DEFAULT"}) {
      SCOPED_TRACE(std::string(c.name) + " engine " + engine);
      CheckGpuMatchesCpu(ConvParam("Convolution", c, engine), {c.bottom_shape});
    }
  }
}

TEST(ConvolutionGpuTest, LargerMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.tolerance = 1e-3f;  // weight gradients sum thousands of terms in another order
  CheckGpuMatchesCpu(
      ConvParam("Convolution", {"large", {4, 16, 20, 20}, 32, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}}),
      {{4, 16, 20, 20}}, options);
  CheckGpuMatchesCpu(
      ConvParam("Convolution",
                {"large_group", {3, 16, 17, 15}, 8, 4, {5, 3}, {2, 1}, {2, 1}, {1, 2}, false}),
      {{3, 16, 17, 15}}, options);
}

// The same cases through cuDNN's graph API (CORTADO_CUDNN_API=graph), which times engine
// configurations instead of the legacy algorithms.
TEST(ConvolutionGpuTest, GraphApiMatchesCpu) {
  CORTADO_REQUIRE_GPU();
  ScopedEnv graph("CORTADO_CUDNN_API", "graph");
  for (const ConvCase& c : ConvCases()) {
    SCOPED_TRACE(c.name);
    CheckGpuMatchesCpu(ConvParam("Convolution", c), {c.bottom_shape});
  }
  GpuCheckOptions options;
  options.tolerance = 1e-3f;
  CheckGpuMatchesCpu(
      ConvParam("Convolution",
                {"large_group", {3, 16, 17, 15}, 8, 4, {5, 3}, {2, 1}, {2, 1}, {1, 2}, false}),
      {{3, 16, 17, 15}}, options);
}

TEST(ConvolutionGpuTest, TwoBottomsShareWeights) {
  CORTADO_REQUIRE_GPU();
  caffe::LayerParameter param =
      ConvParam("Convolution", {"two", {2, 2, 5, 5}, 3, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}});
  param.add_bottom("a");
  param.add_bottom("b");
  param.add_top("c");
  param.add_top("d");
  CheckGpuMatchesCpu(param, {{2, 2, 5, 5}, {2, 2, 5, 5}});
}

TEST(ConvolutionGpuTest, OnlyParameterGradients) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.propagate_down = {false};
  CheckGpuMatchesCpu(
      ConvParam("Convolution", {"params", {2, 3, 5, 5}, 4, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}}),
      {{2, 3, 5, 5}}, options);
}

TEST(ConvolutionGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const ConvCase& c : ConvCases()) {
    SCOPED_TRACE(c.name);
    Context ctx(Device::Cuda(0), 1701);
    auto layer = CreateLayer(ConvParam("Convolution", c), &ctx);
    Tensor bottom(c.bottom_shape), top;
    FillGaussian(&bottom, 0.0f, 1.0f, 7);
    GradientChecker().Check(layer.get(), {&bottom}, {&top});
  }
}

const std::vector<ConvCase>& DeconvCases() {
  static const std::vector<ConvCase> cases = {
      {"basic", {2, 3, 3, 4}, 2, 1, {3, 3}, {1, 1}, {0, 0}, {1, 1}},
      {"stride_pad", {2, 2, 3, 3}, 3, 1, {4, 3}, {2, 2}, {1, 1}, {1, 1}},
      {"group", {2, 4, 3, 3}, 6, 2, {3, 3}, {2, 1}, {1, 0}, {1, 1}},
      {"dilation", {1, 2, 3, 4}, 2, 1, {3, 2}, {1, 2}, {1, 0}, {2, 2}},
      {"no_bias", {2, 2, 3, 3}, 2, 1, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
      {"one_by_one", {3, 3, 3, 3}, 2, 1, {1, 1}, {1, 1}, {0, 0}, {1, 1}},
      {"force_nd", {2, 2, 3, 3}, 4, 2, {3, 3}, {2, 1}, {1, 1}, {1, 1}, true, true},
      {"three_d", {2, 2, 2, 3, 2}, 2, 2, {2, 3, 2}, {2, 1, 2}, {0, 1, 1}, {1, 1, 1}},
  };
  return cases;
}

TEST(DeconvolutionGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (const ConvCase& c : DeconvCases()) {
    SCOPED_TRACE(c.name);
    CheckGpuMatchesCpu(ConvParam("Deconvolution", c), {c.bottom_shape});
  }
  GpuCheckOptions options;
  options.tolerance = 1e-3f;
  CheckGpuMatchesCpu(
      ConvParam("Deconvolution", {"large", {4, 16, 14, 14}, 8, 1, {4, 4}, {2, 2}, {1, 1}, {1, 1}}),
      {{4, 16, 14, 14}}, options);
}

TEST(DeconvolutionGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const ConvCase& c : DeconvCases()) {
    SCOPED_TRACE(c.name);
    Context ctx(Device::Cuda(0), 1701);
    auto layer = CreateLayer(ConvParam("Deconvolution", c), &ctx);
    Tensor bottom(c.bottom_shape), top;
    FillGaussian(&bottom, 0.0f, 1.0f, 7);
    GradientChecker().Check(layer.get(), {&bottom}, {&top});
  }
}

// ---------------------------------------------------------------------------------------------
// Pooling

caffe::LayerParameter PoolParam(const std::string& pooling_param, int num_tops = 1,
                                const std::string& extra = "") {
  caffe::LayerParameter param = LayerParam("name: 'pool' type: 'Pooling' " + extra +
                                           " pooling_param { " + pooling_param + " }");
  for (int i = 0; i < num_tops; ++i) param.add_top("top" + std::to_string(i));
  return param;
}

// Distinct values 0.1 apart in shuffled order (as the CPU pooling test), so a +-0.01 step
// never changes which element is a window's maximum.
void FillDistinct(Tensor* t, unsigned seed, float offset) {
  std::vector<int> order(t->count());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  float* data = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) data[i] = 0.1f * order[i] + offset;
}

TEST(PoolingGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  struct Case {
    std::string param;
    std::vector<int> shape;
    int tops;
  };
  const std::vector<Case> cases = {
      {"pool: MAX kernel_size: 3 stride: 2", {2, 3, 7, 6}, 1},
      {"pool: MAX kernel_size: 3 stride: 2", {2, 3, 6, 6}, 2},
      {"pool: MAX kernel_h: 3 kernel_w: 2 stride_h: 1 stride_w: 2 pad_h: 1 pad_w: 1",
       {2, 2, 5, 6},
       1},
      {"pool: MAX kernel_size: 3 stride: 2 pad: 1", {2, 2, 6, 6}, 2},
      {"pool: MAX kernel_size: 2 stride: 2 round_mode: FLOOR", {1, 2, 5, 5}, 1},
      {"pool: MAX kernel_size: 1 stride: 2", {1, 2, 4, 4}, 2},  // last window outside: 0
      {"pool: MAX kernel_size: 1 stride: 2", {1, 2, 4, 4}, 1},
      {"pool: MAX global_pooling: true", {2, 3, 5, 4}, 1},
      {"pool: MAX global_pooling: true", {2, 3, 5, 4}, 2},
      {"pool: AVE kernel_size: 3 stride: 2", {2, 2, 7, 6}, 1},
      {"pool: AVE kernel_size: 3 stride: 2 pad: 1", {2, 2, 6, 6}, 1},
      {"pool: AVE kernel_h: 2 kernel_w: 3 stride_h: 2 stride_w: 1 pad_h: 1 pad_w: 0",
       {1, 2, 5, 4},
       1},
      {"pool: AVE kernel_size: 2 stride: 3 pad: 1", {1, 2, 5, 5}, 1},
      {"pool: AVE kernel_size: 1 stride: 2", {1, 2, 4, 4}, 1},
      {"pool: AVE global_pooling: true", {2, 3, 3, 4}, 1},
      {"pool: MAX kernel_size: 3 stride: 2 pad: 1", {4, 8, 33, 32}, 1},
      {"pool: AVE kernel_size: 3 stride: 1 pad: 1", {4, 8, 32, 33}, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.param + " tops " + std::to_string(c.tops));
    CheckGpuMatchesCpu(PoolParam(c.param, c.tops), {c.shape});
  }
}

// MAX without a mask top keeps one byte per output (the maximum's place in its window) where the
// window holds at most 255 values, and Caffe's float index beyond. Either way the GPU routes
// each top diff to the element the CPU does, first maximum on ties, and sums them in the same
// order: on values with many ties (as after a ReLU) the bottom diffs are the CPU's, bit for bit.
TEST(PoolingGpuTest, MaxRoutesGradientsLikeTheCpuOnTiesWithBytesOrFloatIndices) {
  CORTADO_REQUIRE_GPU();
  struct Case {
    std::string param;
    std::vector<int> shape;
  };
  const std::vector<Case> cases = {
      {"pool: MAX kernel_size: 3 stride: 2", {2, 4, 13, 13}},             // CaffeNet's
      {"pool: MAX kernel_size: 3 stride: 2 pad: 1", {2, 3, 12, 11}},      // ResNet's
      {"pool: MAX kernel_h: 15 kernel_w: 17 stride: 1", {1, 2, 17, 18}},  // 255 values: bytes
      {"pool: MAX global_pooling: true", {2, 3, 16, 16}},                 // 256: float indices
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.param);
    Context cpu_ctx(Device::Cpu(), 3), gpu_ctx(Device::Cuda(0), 3);
    auto cpu = CreateLayer(PoolParam(c.param), &cpu_ctx);
    auto gpu = CreateLayer(PoolParam(c.param), &gpu_ctx);
    Tensor cpu_bottom(c.shape), gpu_bottom(c.shape), cpu_top, gpu_top;
    std::mt19937 gen(7);
    std::uniform_int_distribution<int> level(-3, 2);  // max(0, level): half of the values are 0
    for (int i = 0; i < cpu_bottom.count(); ++i) {
      cpu_bottom.mutable_cpu_data()[i] = static_cast<float>(std::max(0, level(gen)));
    }
    gpu_bottom.CopyFrom(cpu_bottom);
    cpu->Initialize({&cpu_bottom}, {&cpu_top});
    gpu->Initialize({&gpu_bottom}, {&gpu_top});
    cpu->Forward({&cpu_bottom}, {&cpu_top});
    gpu->Forward({&gpu_bottom}, {&gpu_top});
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int i = 0; i < cpu_top.count(); ++i) {
      cpu_top.mutable_cpu_diff()[i] = u(gen);
      ASSERT_EQ(cpu_top.cpu_data()[i], gpu_top.cpu_data()[i]) << "top " << i;
    }
    gpu_top.CopyFrom(cpu_top, /*copy_diff=*/true);
    cpu->Backward({&cpu_top}, {true}, {&cpu_bottom});
    gpu->Backward({&gpu_top}, {true}, {&gpu_bottom});
    for (int i = 0; i < cpu_bottom.count(); ++i) {
      ASSERT_EQ(cpu_bottom.cpu_diff()[i], gpu_bottom.cpu_diff()[i]) << "bottom diff " << i;
    }
  }
}

void CheckPoolGradient(const std::string& pooling_param, const std::vector<int>& shape,
                       int num_tops, const std::string& extra = "", float offset = -1.0f) {
  SCOPED_TRACE(pooling_param);
  Context ctx(Device::Cuda(0), 1701);
  auto layer = CreateLayer(PoolParam(pooling_param, num_tops, extra), &ctx);
  Tensor bottom(shape), top, mask;
  FillDistinct(&bottom, 5, offset);
  std::vector<Tensor*> tops = {&top};
  if (num_tops == 2) tops.push_back(&mask);
  GradientCheckOptions options;
  options.step = 1e-2f;
  options.threshold = 1e-2f;
  GradientChecker(options).Check(layer.get(), {&bottom}, tops);
}

TEST(PoolingGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  CheckPoolGradient("pool: MAX kernel_size: 3 stride: 2", {2, 2, 7, 6}, 1);
  CheckPoolGradient("pool: MAX kernel_size: 3 stride: 2", {2, 2, 6, 6}, 2);
  CheckPoolGradient("pool: MAX kernel_h: 3 kernel_w: 2 stride_h: 1 stride_w: 2 pad_h: 1 pad_w: 1",
                    {1, 2, 5, 6}, 1);
  CheckPoolGradient("pool: MAX global_pooling: true", {2, 3, 3, 4}, 1);
  CheckPoolGradient("pool: AVE kernel_size: 3 stride: 2", {2, 2, 7, 6}, 1);
  CheckPoolGradient("pool: AVE kernel_size: 3 stride: 2 pad: 1", {2, 2, 6, 6}, 1);
  CheckPoolGradient("pool: AVE kernel_h: 2 kernel_w: 3 stride_h: 2 stride_w: 1 pad_h: 1 pad_w: 0",
                    {1, 2, 5, 4}, 1);
  CheckPoolGradient("pool: AVE global_pooling: true", {2, 3, 3, 4}, 1);
  // STOCHASTIC in TEST is the smooth sum(x^2) / sum(x): positive inputs.
  CheckPoolGradient("pool: STOCHASTIC kernel_size: 3 stride: 2", {2, 2, 7, 6}, 1, "phase: TEST",
                    0.5f);
}

// Host reference of STOCHASTIC's TEST output: sum(x^2) / (FLT_MIN + sum(x)) per window.
std::vector<float> StochasticTestReference(const Tensor& bottom, int kernel, int stride,
                                           int pooled_h, int pooled_w) {
  const int planes = bottom.shape(0) * bottom.shape(1);
  const int height = bottom.shape(2), width = bottom.shape(3);
  std::vector<float> out;
  for (int p = 0; p < planes; ++p) {
    const float* x = bottom.cpu_data() + p * height * width;
    for (int ph = 0; ph < pooled_h; ++ph) {
      for (int pw = 0; pw < pooled_w; ++pw) {
        float sum = FLT_MIN, squares = 0.0f;
        for (int h = ph * stride; h < std::min(ph * stride + kernel, height); ++h) {
          for (int w = pw * stride; w < std::min(pw * stride + kernel, width); ++w) {
            sum += x[h * width + w];
            squares += x[h * width + w] * x[h * width + w];
          }
        }
        out.push_back(squares / sum);
      }
    }
  }
  return out;
}

TEST(PoolingGpuTest, StochasticTestPhaseIsTheWeightedAverage) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  auto layer =
      CreateLayer(PoolParam("pool: STOCHASTIC kernel_size: 3 stride: 2", 1, "phase: TEST"), &ctx);
  Tensor bottom({2, 3, 7, 6}), top;
  FillUniform(&bottom, 0.0f, 1.0f, 3);
  float* data = bottom.mutable_cpu_data();
  std::fill(data, data + 6 * 3, 0.0f);  // an all-zero window (the first of plane 0) gives 0
  layer->Initialize({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{2, 3, 3, 3}));  // ceil((7 - 3) / 2) + 1, (6 - 3)
  layer->Forward({&bottom}, {&top});
  const std::vector<float> expected = StochasticTestReference(bottom, 3, 2, 3, 3);
  ASSERT_EQ(static_cast<int>(expected.size()), top.count());
  EXPECT_EQ(top.cpu_data()[0], 0.0f);
  detail::ExpectClose(expected.data(), top.cpu_data(), top.count(), 1e-5f, "stochastic test top");
}

TEST(PoolingGpuTest, StochasticTrainDrawsAWindowElementAndRoutesItsGradient) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  const int kernel = 3, stride = 2;
  auto layer = CreateLayer(PoolParam("pool: STOCHASTIC kernel_size: 3 stride: 2"), &ctx);
  Tensor bottom({2, 2, 7, 6}), top;
  FillDistinct(&bottom, 9, 0.1f);  // positive and distinct, so a value names its element
  layer->Initialize({&bottom}, {&top});
  // Re-seeded, the same draws.
  ctx.Seed(1701);
  layer->Forward({&bottom}, {&top});
  const std::vector<float> first(top.cpu_data(), top.cpu_data() + top.count());
  ctx.Seed(1701);
  layer->Forward({&bottom}, {&top});
  const std::vector<float> second(top.cpu_data(), top.cpu_data() + top.count());
  EXPECT_EQ(first, second);

  const int height = 7, width = 6, pooled_h = top.shape(2), pooled_w = top.shape(3);
  float* top_diff = top.mutable_cpu_diff();
  for (int i = 0; i < top.count(); ++i) top_diff[i] = 1.0f + i;
  layer->Backward({&top}, {true}, {&bottom});
  std::vector<float> expected_diff(bottom.count(), 0.0f);
  const float* x = bottom.cpu_data();
  for (int p = 0; p < 4; ++p) {
    for (int ph = 0; ph < pooled_h; ++ph) {
      for (int pw = 0; pw < pooled_w; ++pw) {
        const int out = (p * pooled_h + ph) * pooled_w + pw;
        int found = -1;
        for (int h = ph * stride; h < std::min(ph * stride + kernel, height); ++h) {
          for (int w = pw * stride; w < std::min(pw * stride + kernel, width); ++w) {
            if (x[(p * height + h) * width + w] == top.cpu_data()[out]) {
              found = (p * height + h) * width + w;
            }
          }
        }
        ASSERT_GE(found, 0) << "output " << out << " (" << top.cpu_data()[out]
                            << ") is not an element of its window";
        expected_diff[found] += top_diff[out];
      }
    }
  }
  detail::ExpectClose(expected_diff.data(), bottom.cpu_diff(), bottom.count(), 0.0f,
                      "stochastic bottom diff");
}

TEST(PoolingGpuTest, StochasticTrainDrawsInProportionToTheValues) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1701);
  // 4096 windows of two elements, 1 and 3: the 3 should be drawn 3/4 of the time.
  auto layer = CreateLayer(
      PoolParam("pool: STOCHASTIC kernel_h: 2 kernel_w: 1 stride_h: 2 stride_w: 1"), &ctx);
  const int n = 4096;
  Tensor bottom({1, 1, 2, n}), top;
  float* x = bottom.mutable_cpu_data();
  std::fill(x, x + n, 1.0f);
  std::fill(x + n, x + 2 * n, 3.0f);
  layer->Initialize({&bottom}, {&top});
  ASSERT_EQ(top.count(), n);
  layer->Forward({&bottom}, {&top});
  const int threes = static_cast<int>(std::count(top.cpu_data(), top.cpu_data() + n, 3.0f));
  const int ones = static_cast<int>(std::count(top.cpu_data(), top.cpu_data() + n, 1.0f));
  EXPECT_EQ(threes + ones, n);
  EXPECT_NEAR(threes / static_cast<double>(n), 0.75, 0.03);  // about 4.4 standard deviations
}

// ---------------------------------------------------------------------------------------------
// LRN

TEST(LRNGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  struct Case {
    std::string param;
    std::vector<int> shape;
  };
  const std::vector<Case> cases = {
      {"", {2, 7, 3, 3}},
      {"local_size: 3 alpha: 2 beta: 0.6 k: 1.5", {2, 4, 2, 3}},
      {"local_size: 7 alpha: 1.5", {1, 3, 2, 2}},
      {"local_size: 5 alpha: 0.0001 beta: 0.75", {4, 32, 13, 13}},
      {"local_size: 3 alpha: 2 norm_region: WITHIN_CHANNEL", {2, 2, 4, 5}},
      {"norm_region: WITHIN_CHANNEL", {2, 3, 6, 7}},
      {"local_size: 7 alpha: 1.5 beta: 0.6 norm_region: WITHIN_CHANNEL", {2, 3, 4, 3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.param);
    CheckGpuMatchesCpu(LayerParam("name: 'norm' type: 'LRN' lrn_param { " + c.param + " }"),
                       {c.shape});
  }
}

TEST(LRNGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  struct Case {
    std::string param;
    std::vector<int> shape;
  };
  const std::vector<Case> cases = {
      {"", {2, 7, 3, 3}},
      {"local_size: 3 alpha: 2 beta: 0.6 k: 1.5", {2, 4, 2, 3}},
      {"local_size: 7 alpha: 1.5", {1, 3, 2, 2}},
      {"local_size: 3 alpha: 2 norm_region: WITHIN_CHANNEL", {2, 2, 4, 5}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.param);
    Context ctx(Device::Cuda(0), 1701);
    Tensor in(c.shape), top;
    FillGaussian(&in);
    auto layer =
        CreateLayer(LayerParam("name: 'norm' type: 'LRN' lrn_param { " + c.param + " }"), &ctx);
    GradientCheckOptions options;
    options.threshold = 1e-2f;  // as the CPU LRN test (and Caffe's)
    GradientChecker(options).Check(layer.get(), {&in}, {&top});
  }
}

// ---------------------------------------------------------------------------------------------
// BatchNorm

// Runs a BatchNorm layer on the CPU and on the GPU for `iterations` forward/backward passes
// with fresh inputs and top diffs each time, comparing tops, bottom diffs and the statistics
// blobs after every pass. Returns the two layers (with their contexts) for further use.
struct BatchNormPair {
  std::unique_ptr<Context> cpu_ctx, gpu_ctx;
  std::unique_ptr<Layer> cpu, gpu;
};

void RunBatchNormPair(BatchNormPair* pair, const std::vector<int>& shape, int iterations,
                      bool in_place, unsigned seed, float tolerance = 1e-4f) {
  Tensor cpu_bottom(shape), gpu_bottom(shape), cpu_top_store, gpu_top_store;
  Tensor* cpu_top = in_place ? &cpu_bottom : &cpu_top_store;
  Tensor* gpu_top = in_place ? &gpu_bottom : &gpu_top_store;
  for (int it = 0; it < iterations; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    FillGaussian(&cpu_bottom, 0.5f * it, 2.0f, seed + it);
    gpu_bottom.CopyFrom(cpu_bottom);
    if (it == 0) {
      pair->cpu->Initialize({&cpu_bottom}, {cpu_top});
      pair->gpu->Initialize({&gpu_bottom}, {gpu_top});
      for (size_t i = 0; i < pair->cpu->blobs().size(); ++i) {
        pair->gpu->blobs()[i]->CopyFrom(*pair->cpu->blobs()[i]);
      }
    } else {
      pair->cpu->Reshape({&cpu_bottom}, {cpu_top});
      pair->gpu->Reshape({&gpu_bottom}, {gpu_top});
    }
    pair->cpu->Forward({&cpu_bottom}, {cpu_top});
    pair->gpu->Forward({&gpu_bottom}, {gpu_top});
    detail::ExpectClose(cpu_top->cpu_data(), gpu_top->cpu_data(), cpu_top->count(), tolerance,
                        "top");
    for (size_t i = 0; i < pair->cpu->blobs().size(); ++i) {
      detail::ExpectClose(pair->cpu->blobs()[i]->cpu_data(), pair->gpu->blobs()[i]->cpu_data(),
                          pair->cpu->blobs()[i]->count(), tolerance,
                          "statistics blob " + std::to_string(i));
    }
    FillUniform(cpu_top, -1.0f, 1.0f, 100 + seed + it);
    std::copy(cpu_top->cpu_data(), cpu_top->cpu_data() + cpu_top->count(),
              cpu_top->mutable_cpu_diff());
    gpu_top->CopyFrom(*cpu_top, /*copy_diff=*/true);
    // The data of an in-place top is the next iteration's input; only the diff matters here.
    pair->cpu->Backward({cpu_top}, {true}, {&cpu_bottom});
    pair->gpu->Backward({gpu_top}, {true}, {&gpu_bottom});
    detail::ExpectClose(cpu_bottom.cpu_diff(), gpu_bottom.cpu_diff(), cpu_bottom.count(), tolerance,
                        "bottom diff");
  }
}

BatchNormPair MakeBatchNormPair(const std::string& text) {
  BatchNormPair pair;
  pair.cpu_ctx = std::make_unique<Context>(Device::Cpu(), 1701);
  pair.gpu_ctx = std::make_unique<Context>(Device::Cuda(0), 1701);
  pair.cpu = CreateLayer(LayerParam(text), pair.cpu_ctx.get());
  pair.gpu = CreateLayer(LayerParam(text), pair.gpu_ctx.get());
  return pair;
}

TEST(BatchNormGpuTest, TrainingMatchesCpuOverIterations) {
  CORTADO_REQUIRE_GPU();
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    BatchNormPair pair = MakeBatchNormPair(
        "name: 'bn' type: 'BatchNorm' batch_norm_param { moving_average_fraction: 0.9 eps: 1e-4 }");
    RunBatchNormPair(&pair, {3, 4, 5, 6}, 4, in_place, 11);
  }
  BatchNormPair two_axes = MakeBatchNormPair("name: 'bn' type: 'BatchNorm'");
  RunBatchNormPair(&two_axes, {7, 5}, 3, false, 21);
  BatchNormPair large = MakeBatchNormPair("name: 'bn' type: 'BatchNorm'");
  RunBatchNormPair(&large, {16, 8, 24, 24}, 3, false, 31, 1e-3f);
}

// ResNet-50 shapes: many blocks per channel (float4 and scalar paths), in place as in the net.
TEST(BatchNormGpuTest, ResNetShapesMatchCpu) {
  CORTADO_REQUIRE_GPU();
  for (const std::vector<int>& shape : std::vector<std::vector<int>>{
           {8, 64, 56, 56}, {32, 2048, 7, 7}, {16, 3, 45, 45}, {2, 5, 1, 12345}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    BatchNormPair pair = MakeBatchNormPair(
        "name: 'bn' type: 'BatchNorm' batch_norm_param { moving_average_fraction: 0.9 }");
    RunBatchNormPair(&pair, shape, 2, true, 81, 1e-3f);
  }
  // A large mean next to a small spread: the variance must not cancel away.
  BatchNormPair offset = MakeBatchNormPair("name: 'bn' type: 'BatchNorm'");
  Tensor cpu_bottom({8, 16, 28, 28}), gpu_bottom({8, 16, 28, 28}), cpu_top, gpu_top;
  FillGaussian(&cpu_bottom, 300.0f, 0.05f, 91);
  gpu_bottom.CopyFrom(cpu_bottom);
  offset.cpu->Initialize({&cpu_bottom}, {&cpu_top});
  offset.gpu->Initialize({&gpu_bottom}, {&gpu_top});
  offset.cpu->Forward({&cpu_bottom}, {&cpu_top});
  offset.gpu->Forward({&gpu_bottom}, {&gpu_top});
  detail::ExpectClose(cpu_top.cpu_data(), gpu_top.cpu_data(), cpu_top.count(), 2e-3f, "top");
}

// Two runs on the same data give the same bits (fixed grid and summation order).
TEST(BatchNormGpuTest, Deterministic) {
  CORTADO_REQUIRE_GPU();
  std::vector<float> first_top, first_diff;
  for (int run = 0; run < 2; ++run) {
    Context ctx(Device::Cuda(0), 1701);
    auto layer = CreateLayer(LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
    Tensor bottom({16, 64, 28, 28}), top;
    FillGaussian(&bottom, 0.5f, 2.0f, 7);
    layer->Initialize({&bottom}, {&top});
    layer->Forward({&bottom}, {&top});
    FillUniform(&top, -1.0f, 1.0f, 8);
    std::copy(top.cpu_data(), top.cpu_data() + top.count(), top.mutable_cpu_diff());
    layer->Backward({&top}, {true}, {&bottom});
    std::vector<float> out(top.cpu_data(), top.cpu_data() + top.count());
    std::vector<float> diff(bottom.cpu_diff(), bottom.cpu_diff() + bottom.count());
    if (run == 0) {
      first_top = out;
      first_diff = diff;
    } else {
      EXPECT_TRUE(out == first_top);
      EXPECT_TRUE(diff == first_diff);
    }
  }
}

TEST(BatchNormGpuTest, GlobalStatisticsMatchCpu) {
  CORTADO_REQUIRE_GPU();
  // Before any training the normaliser is 0: the statistics read as zero mean and variance.
  BatchNormPair fresh =
      MakeBatchNormPair("name: 'bn' type: 'BatchNorm' batch_norm_param { use_global_stats: true }");
  RunBatchNormPair(&fresh, {2, 3, 4, 4}, 2, false, 41);

  // Statistics accumulated by training on each device, then used by a TEST-phase layer there.
  BatchNormPair train = MakeBatchNormPair("name: 'bn' type: 'BatchNorm'");
  RunBatchNormPair(&train, {4, 3, 5, 5}, 3, false, 51);
  BatchNormPair test = MakeBatchNormPair("name: 'bn' type: 'BatchNorm' phase: TEST");
  Tensor cpu_bottom({4, 3, 5, 5}), gpu_bottom({4, 3, 5, 5}), cpu_top, gpu_top;
  FillGaussian(&cpu_bottom, 0.3f, 1.5f, 61);
  gpu_bottom.CopyFrom(cpu_bottom);
  test.cpu->Initialize({&cpu_bottom}, {&cpu_top});
  test.gpu->Initialize({&gpu_bottom}, {&gpu_top});
  for (size_t i = 0; i < 3; ++i) {
    test.cpu->blobs()[i]->CopyFrom(*train.cpu->blobs()[i]);
    test.gpu->blobs()[i]->CopyFrom(*train.gpu->blobs()[i]);
  }
  test.cpu->Forward({&cpu_bottom}, {&cpu_top});
  test.gpu->Forward({&gpu_bottom}, {&gpu_top});
  detail::ExpectClose(cpu_top.cpu_data(), gpu_top.cpu_data(), cpu_top.count(), 1e-4f, "TEST top");
  FillUniform(&cpu_top, -1.0f, 1.0f, 71);
  std::copy(cpu_top.cpu_data(), cpu_top.cpu_data() + cpu_top.count(), cpu_top.mutable_cpu_diff());
  gpu_top.CopyFrom(cpu_top, /*copy_diff=*/true);
  test.cpu->Backward({&cpu_top}, {true}, {&cpu_bottom});
  test.gpu->Backward({&gpu_top}, {true}, {&gpu_bottom});
  detail::ExpectClose(cpu_bottom.cpu_diff(), gpu_bottom.cpu_diff(), cpu_bottom.count(), 1e-4f,
                      "TEST bottom diff");
  // The statistics are left alone in TEST.
  for (size_t i = 0; i < 3; ++i) {
    detail::ExpectClose(train.gpu->blobs()[i]->cpu_data(), test.gpu->blobs()[i]->cpu_data(),
                        test.gpu->blobs()[i]->count(), 0.0f, "TEST statistics");
  }
}

TEST(BatchNormGpuTest, MatchesCpuThroughTheHarness) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam("name: 'bn' type: 'BatchNorm'"), {{2, 3, 4, 5}});
  GpuCheckOptions in_place;
  in_place.in_place = true;
  CheckGpuMatchesCpu(LayerParam("name: 'bn' type: 'BatchNorm'"), {{2, 3, 4, 5}}, in_place);
}

TEST(BatchNormGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  GradientCheckOptions options;
  options.check_params = false;  // running statistics, not parameters
  {
    Context ctx(Device::Cuda(0), 1701);
    Tensor in({2, 3, 2, 3}), top;
    FillGaussian(&in, 0.5f, 2.0f);
    auto layer = CreateLayer(LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
    GradientChecker(options).Check(layer.get(), {&in}, {&top});
  }
  {
    Context ctx(Device::Cuda(0), 1701);
    Tensor in({5, 3}), top;
    FillGaussian(&in);
    auto layer = CreateLayer(LayerParam("name: 'bn' type: 'BatchNorm'"), &ctx);
    GradientChecker(options).Check(layer.get(), {&in}, {&top});
  }
  {
    Context ctx(Device::Cuda(0), 1701);
    Tensor in({2, 3, 2, 2}), top;
    FillGaussian(&in);
    auto layer = CreateLayer(
        LayerParam("name: 'bn' type: 'BatchNorm' batch_norm_param { use_global_stats: true }"),
        &ctx);
    layer->Initialize({&in}, {&top});
    const std::vector<std::vector<float>> stats = {{0.3f, -0.6f, 1.5f}, {1.5f, 0.9f, 6.0f}, {1.5f}};
    for (size_t i = 0; i < stats.size(); ++i) {
      std::copy(stats[i].begin(), stats[i].end(), layer->blobs()[i]->mutable_cpu_data());
    }
    GradientChecker(options).Check(layer.get(), {&in}, {&top});
  }
}

}  // namespace
}  // namespace cortado::testing
