// SPDX-License-Identifier: Apache-2.0
// Mixed precision: the layers that read and write 16-bit blobs on the GPU (ReLU, the residual
// sum, Split, pooling, InnerProduct, LRN, Dropout) against the CPU in float32, with their blobs
// kept in the half type and with float32 blobs whose half twins they use. The GPU side rounds its
// inputs once and its outputs once; the tolerance is a few units of the type's rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/half_type.hpp"
#include "core/tensor.hpp"
#include "layers/layer.hpp"
#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {
namespace {

struct HalfCase {
  HalfType type;
  bool homes;
};

class HalfLayersGpuTest : public ::testing::TestWithParam<HalfCase> {
 protected:
  GpuCheckOptions Options() const {
    GpuCheckOptions options;
    options.half = GetParam().type;
    options.half_homes = GetParam().homes;
    // float16 keeps 11 significant bits, bfloat16 8: two roundings of values up to a few units.
    options.tolerance = GetParam().type == HalfType::kFloat16 ? 4e-3f : 3e-2f;
    return options;
  }
};

TEST_P(HalfLayersGpuTest, Relu) {
  CORTADO_REQUIRE_GPU();
  CheckBothWays("name: 'relu' type: 'ReLU'", {2, 3, 5, 7}, Options());
  CheckBothWays("name: 'leaky' type: 'ReLU' relu_param { negative_slope: 0.1 }", {3, 4, 3, 3},
                Options());
}

TEST_P(HalfLayersGpuTest, ResidualSum) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam("name: 'sum' type: 'Eltwise' bottom: 'a' bottom: 'b'"),
                     {{2, 6, 5, 5}, {2, 6, 5, 5}}, Options());
  CheckGpuMatchesCpu(
      LayerParam("name: 'sum' type: 'Eltwise' bottom: 'a' bottom: 'b' eltwise_param { "
                 "coeff: 0.5 coeff: -2 }"),
      {{3, 7, 4, 3}, {3, 7, 4, 3}}, Options());
}

TEST_P(HalfLayersGpuTest, SplitSumsItsTopsGradients) {
  CORTADO_REQUIRE_GPU();
  for (const char* tops : {"top: 'a'", "top: 'a' top: 'b'", "top: 'a' top: 'b' top: 'c'"}) {
    SCOPED_TRACE(tops);
    CheckGpuMatchesCpu(LayerParam(std::string("name: 'split' type: 'Split' ") + tops),
                       {{2, 5, 3, 7}}, Options());
  }
}

// Inputs both 16-bit types hold exactly (k / 64, |k| <= 256): rounding cannot make two values of
// a window equal on the GPU that differ on the CPU, so MAX picks the same element on both.
void FillExactly(int index, Tensor* t) {
  std::mt19937 rng(17 + index);
  std::uniform_int_distribution<int> k(-256, 256);
  for (int i = 0; i < t->count(); ++i) t->mutable_cpu_data()[i] = k(rng) / 64.0f;
}

TEST_P(HalfLayersGpuTest, Pooling) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options = Options();
  options.fill_bottom = FillExactly;
  // One named top: the 16-bit passes are for MAX and AVE without a mask top.
  CheckGpuMatchesCpu(LayerParam("name: 'max' type: 'Pooling' top: 'y' pooling_param { pool: MAX "
                                "kernel_size: 3 stride: 2 pad: 1 }"),
                     {{2, 4, 9, 11}}, options);
  CheckGpuMatchesCpu(LayerParam("name: 'ave' type: 'Pooling' top: 'y' pooling_param { pool: AVE "
                                "kernel_size: 3 stride: 2 }"),
                     {{2, 3, 8, 7}}, Options());
  CheckGpuMatchesCpu(LayerParam("name: 'global' type: 'Pooling' top: 'y' pooling_param { pool: "
                                "AVE global_pooling: true }"),
                     {{3, 8, 7, 7}}, Options());
  {
    Context ctx(Device::Cuda(0), 1);
    ctx.set_half_compute(GetParam().type);
    EXPECT_EQ(CreateLayer(LayerParam("name: 'max' type: 'Pooling' top: 'y' pooling_param { "
                                     "pool: MAX kernel_size: 2 }"),
                          &ctx)
                  ->HalfTensors(),
              GetParam().type);
  }
}

// Channels-last 16-bit blobs (Tensor::home_nhwc), as a net keeps them between convolutions: the
// element-wise layers with every blob in NHWC, and pooling with its bottom, its top or both in
// NHWC (MAX with padding and with ResNet's unpadded 3x3 stride 2, AVE, global AVE). The float32
// views the comparison reads are NCHW, so the GPU results must land in the right places.
TEST_P(HalfLayersGpuTest, ChannelsLastTensors) {
  CORTADO_REQUIRE_GPU();
  if (!GetParam().homes) GTEST_SKIP() << "channels-last needs 16-bit homes";
  GpuCheckOptions all = Options();
  all.nhwc_bottoms = all.nhwc_tops = true;
  CheckBothWays("name: 'relu' type: 'ReLU'", {2, 6, 5, 7}, all);
  CheckGpuMatchesCpu(LayerParam("name: 'sum' type: 'Eltwise' bottom: 'a' bottom: 'b'"),
                     {{2, 6, 5, 5}, {2, 6, 5, 5}}, all);
  CheckGpuMatchesCpu(LayerParam("name: 'split' type: 'Split' top: 'a' top: 'b'"), {{2, 5, 3, 7}},
                     all);
  const char* pools[] = {"pool: MAX kernel_size: 3 stride: 2 pad: 1",
                         "pool: MAX kernel_size: 3 stride: 2", "pool: AVE kernel_size: 3 stride: 2",
                         "pool: AVE global_pooling: true"};
  for (const char* pool : pools) {
    for (int sides = 1; sides <= 3; ++sides) {
      GpuCheckOptions options = Options();
      options.fill_bottom = FillExactly;
      options.nhwc_bottoms = (sides & 1) != 0;
      options.nhwc_tops = (sides & 2) != 0;
      SCOPED_TRACE(std::string(pool) + (options.nhwc_bottoms ? ", bottom NHWC" : "") +
                   (options.nhwc_tops ? ", top NHWC" : ""));
      CheckGpuMatchesCpu(
          LayerParam(std::string("name: 'pool' type: 'Pooling' top: 'y' pooling_param { ") + pool +
                     " }"),
          {{2, 12, 9, 11}}, options);
    }
  }
}

TEST_P(HalfLayersGpuTest, InnerProduct) {
  CORTADO_REQUIRE_GPU();
  const std::string fillers =
      "weight_filler { type: 'gaussian' std: 0.1 } bias_filler { type: 'uniform' min: -1 max: 1 }";
  CheckGpuMatchesCpu(LayerParam("name: 'ip' type: 'InnerProduct' inner_product_param { "
                                "num_output: 11 " +
                                fillers + " }"),
                     {{6, 3, 5, 7}}, Options());
  CheckGpuMatchesCpu(LayerParam("name: 'ip' type: 'InnerProduct' inner_product_param { "
                                "num_output: 9 transpose: true " +
                                fillers + " }"),
                     {{5, 33}}, Options());
  CheckGpuMatchesCpu(LayerParam("name: 'ip' type: 'InnerProduct' inner_product_param { "
                                "num_output: 4 axis: 2 bias_term: false " +
                                fillers + " }"),
                     {{2, 3, 10}}, Options());
}

TEST_P(HalfLayersGpuTest, Lrn) {
  CORTADO_REQUIRE_GPU();
  // CaffeNet's parameters, and ones that make the normalisation matter at these magnitudes.
  CheckGpuMatchesCpu(LayerParam("name: 'norm' type: 'LRN' lrn_param { local_size: 5 alpha: 0.0001 "
                                "beta: 0.75 }"),
                     {{2, 7, 5, 6}}, Options());
  CheckGpuMatchesCpu(LayerParam("name: 'norm' type: 'LRN' lrn_param { local_size: 3 alpha: 2 "
                                "beta: 0.75 k: 2 }"),
                     {{2, 6, 4, 5}}, Options());
  CheckGpuMatchesCpu(LayerParam("name: 'norm' type: 'LRN' lrn_param { local_size: 3 alpha: 1.5 "
                                "beta: 0.75 norm_region: WITHIN_CHANNEL }"),
                     {{2, 3, 6, 5}}, Options());
}

TEST_P(HalfLayersGpuTest, DropoutAtTestTime) {
  CORTADO_REQUIRE_GPU();
  CheckBothWays("name: 'drop' type: 'Dropout' phase: TEST dropout_param { dropout_ratio: 0.3 }",
                {2, 3, 4, 5}, Options());
  CheckBothWays(
      "name: 'drop' type: 'Dropout' phase: TEST dropout_param { dropout_ratio: 0.3 "
      "scale_train: false }",
      {2, 3, 4, 5}, Options());
}

// At train time the GPU draws its own mask: each top value is 0 or the bottom's times 1 / 0.7
// (rounded once), about 30% are 0, and Backward passes the gradient through the same mask.
TEST_P(HalfLayersGpuTest, DropoutMaskAtTrainTime) {
  CORTADO_REQUIRE_GPU();
  const HalfType type = GetParam().type;
  const float tolerance = Options().tolerance;
  const float scale = 1.0f / 0.7f;
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "separate top");
    Context ctx(Device::Cuda(0), 1701);
    ctx.set_half_compute(type);
    auto layer = CreateLayer(
        LayerParam(
            "name: 'drop' type: 'Dropout' phase: TRAIN dropout_param { dropout_ratio: 0.3 }"),
        &ctx);
    Tensor input({4, 5, 30, 20}), bottom({4, 5, 30, 20}), separate_top;
    FillUniform(&input, 1.0f, 2.0f);  // never 0, so a 0 in the top means dropped
    if (GetParam().homes) {
      bottom.set_home_type(type);
      separate_top.set_home_type(type);
    }
    Tensor* top = in_place ? &bottom : &separate_top;
    layer->Initialize({&bottom}, {top});
    bottom.CopyFrom(input);
    // What the GPU sees: the input rounded to the type.
    std::vector<float> x(bottom.cpu_data(), bottom.cpu_data() + bottom.count());
    layer->Forward({&bottom}, {top});
    const int n = top->count();
    std::vector<float> y(top->cpu_data(), top->cpu_data() + n);
    int kept = 0;
    for (int i = 0; i < n; ++i) {
      if (y[i] == 0.0f) continue;
      ++kept;
      ASSERT_NEAR(y[i], x[i] * scale, tolerance * x[i] * scale) << i;
    }
    EXPECT_NEAR(static_cast<double>(kept) / n, 0.7, 0.02);

    Tensor dy({4, 5, 30, 20});
    FillUniform(&dy, -1.0f, 1.0f, 5);
    std::copy_n(dy.cpu_data(), n, top->mutable_cpu_diff());
    layer->Backward({top}, {true}, {&bottom});
    for (int i = 0; i < n; ++i) {
      const float expected = y[i] != 0.0f ? dy.cpu_data()[i] * scale : 0.0f;
      ASSERT_NEAR(bottom.cpu_diff()[i], expected, tolerance * std::max(1.0f, std::fabs(expected)))
          << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, HalfLayersGpuTest,
                         ::testing::Values(HalfCase{HalfType::kFloat16, true},
                                           HalfCase{HalfType::kFloat16, false},
                                           HalfCase{HalfType::kBFloat16, true},
                                           HalfCase{HalfType::kBFloat16, false}),
                         [](const auto& param_info) {
                           return std::string(HalfTypeName(param_info.param.type)) +
                                  (param_info.param.homes ? "_half_blobs" : "_float_blobs");
                         });

}  // namespace
}  // namespace cortado::testing
