// SPDX-License-Identifier: Apache-2.0
// Threshold, BNLL, Clip, Swish, Tile, Reduction, MVN, Parameter and Im2col on the GPU against
// the CPU, and their gradient checks there.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {
namespace {

GpuCheckOptions Gaussian(float stddev) {
  GpuCheckOptions options;
  options.fill_bottom = [stddev](int i, Tensor* t) { FillGaussian(t, 0.0f, stddev, 11 + i); };
  return options;
}

TEST(ThresholdGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  GpuCheckOptions options;
  options.forward_only = true;
  CheckBothWays("type: 'Threshold'", {2, 3, 4, 5}, options);
  CheckBothWays("type: 'Threshold' threshold_param { threshold: 0.3 }", {2, 3, 4, 5}, options);
}

TEST(ThresholdGpuTest, BackwardWithPropagateDownIsAnError) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1);
  auto layer = CreateLayer(LayerParam("name: 'thr' type: 'Threshold'"), &ctx);
  Tensor bottom({2, 3}), top;
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  layer->Backward({&top}, {false}, {&bottom});  // nothing asked, nothing done
  try {
    layer->Backward({&top}, {true}, {&bottom});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("layer 'thr' (Threshold)"), std::string::npos) << e.what();
  }
}

TEST(BNLLGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckBothWays("type: 'BNLL'", {2, 3, 4, 5}, Gaussian(3.0f));
  // Far out on both sides, beyond the gradient's clamp at 50.
  GpuCheckOptions options;
  options.fill_bottom = [](int, Tensor* t) { FillUniform(t, -120.0f, 120.0f, 5); };
  CheckBothWays("type: 'BNLL'", {4, 50}, options);
}

TEST(BNLLGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 2, 2});
  FillGaussian(&bottom, 0.0f, 2.0f);
  GpuGradientCheck("type: 'BNLL'", &bottom);
}

TEST(ClipGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckBothWays("type: 'Clip' clip_param { min: -0.5 max: 0.75 }", {2, 3, 4, 5});
  // Inputs exactly on the bounds take the gradient (inclusive ends).
  GpuCheckOptions options;
  options.fill_bottom = [](int, Tensor* t) {
    float* x = t->mutable_cpu_data();
    for (int i = 0; i < t->count(); ++i) x[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
  };
  CheckBothWays("type: 'Clip' clip_param { min: -0.5 max: 0.5 }", {3, 10}, options);
}

TEST(ClipGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 2, 2});
  FillGaussian(&bottom, 0.0f, 1.5f);
  GradientCheckOptions options;
  options.kink = 1.0f;
  options.kink_range = 0.02f;
  GpuGradientCheck("type: 'Clip' clip_param { min: -1 max: 1 }", &bottom, options);
}

TEST(SwishGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (float beta : {1.0f, 0.5f, -2.0f}) {
    SCOPED_TRACE(beta);
    CheckBothWays(fmt::format("type: 'Swish' swish_param {{ beta: {} }}", beta), {2, 3, 4, 5},
                  Gaussian(3.0f));
  }
}

TEST(SwishGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 2, 2});
  FillGaussian(&bottom, 0.0f, 2.0f);
  GpuGradientCheck("type: 'Swish' swish_param { beta: 1.5 }", &bottom);
}

TEST(TileGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  struct Case {
    const char* fields;
    std::vector<int> shape;
  };
  const Case cases[] = {{"tiles: 3", {2, 3, 4, 5}},
                        {"axis: 0 tiles: 2", {2, 3, 4}},
                        {"axis: -1 tiles: 4", {2, 3, 7}},
                        {"axis: 2 tiles: 1", {2, 3, 4}},
                        {"axis: 1 tiles: 64", {3, 5, 33}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fields);
    CheckGpuMatchesCpu(LayerParam(std::string("type: 'Tile' tile_param { ") + c.fields + " }"),
                       {c.shape});
  }
}

TEST(TileGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Tensor bottom({2, 3, 2});
  FillGaussian(&bottom);
  GpuGradientCheck("type: 'Tile' tile_param { axis: 1 tiles: 3 }", &bottom);
}

TEST(ReductionGpuTest, MatchesCpuEveryOpAndAxis) {
  CORTADO_REQUIRE_GPU();
  struct Case {
    const char* axis;
    std::vector<int> shape;
  };
  // Rows shorter than a block, one long row, many rows.
  const Case cases[] = {{"0", {2, 3, 4, 5}},
                        {"1", {2, 3, 4, 5}},
                        {"-1", {6, 7, 9}},
                        {"0", {3, 1000, 17}},
                        {"1", {300, 5000}}};
  for (const char* op : {"SUM", "ASUM", "SUMSQ", "MEAN"}) {
    for (const Case& c : cases) {
      const std::string text = fmt::format(
          "type: 'Reduction' reduction_param {{ operation: {} axis: {} coeff: -0.7 }}", op, c.axis);
      SCOPED_TRACE(text);
      CheckGpuMatchesCpu(LayerParam(text), {c.shape});
    }
  }
}

TEST(ReductionGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const char* op : {"SUM", "ASUM", "SUMSQ", "MEAN"}) {
    SCOPED_TRACE(op);
    Tensor bottom({2, 3, 4});
    FillUniform(&bottom, 0.1f, 1.5f);
    float* x = bottom.mutable_cpu_data();
    for (int i = 0; i < bottom.count(); i += 2) x[i] = -x[i];  // both signs, off ASUM's kink
    GpuGradientCheck(fmt::format("type: 'Reduction' reduction_param {{ operation: {} axis: 1 "
                                 "coeff: 2 }}",
                                 op),
                     &bottom);
  }
}

std::string MvnText(bool normalize_variance, bool across_channels) {
  return fmt::format("type: 'MVN' mvn_param {{ normalize_variance: {} across_channels: {} }}",
                     normalize_variance ? "true" : "false", across_channels ? "true" : "false");
}

TEST(MVNGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (bool normalize : {true, false}) {
    for (bool across : {false, true}) {
      const std::string text = MvnText(normalize, across);
      SCOPED_TRACE(text);
      GpuCheckOptions options = Gaussian(2.0f);
      CheckBothWays(text, {2, 3, 4, 5}, options);
      CheckBothWays(text, {2, 3, 40, 50}, options);  // rows longer than a block
      CheckBothWays(text, {4, 6}, options);          // a 2-axis bottom (top gets 4 axes)
    }
  }
}

TEST(MVNGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (bool normalize : {true, false}) {
    for (bool across : {false, true}) {
      const std::string text = MvnText(normalize, across);
      SCOPED_TRACE(text);
      Tensor bottom({2, 3, 2, 3});
      FillGaussian(&bottom, 0.5f, 2.0f);
      GpuGradientCheck(text, &bottom);
    }
  }
}

constexpr const char* kParameterText =
    "type: 'Parameter' parameter_param { shape { dim: 3 dim: 4 dim: 5 } }";

TEST(ParameterGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  CheckGpuMatchesCpu(LayerParam(kParameterText), {});  // backward: the param diffs agree
  // Forward with a non-zero blob.
  Context cpu(Device::Cpu(), 1), gpu(Device::Cuda(0), 1);
  auto cpu_layer = CreateLayer(LayerParam(kParameterText), &cpu);
  auto gpu_layer = CreateLayer(LayerParam(kParameterText), &gpu);
  Tensor cpu_top, gpu_top;
  cpu_layer->Initialize({}, {&cpu_top});
  gpu_layer->Initialize({}, {&gpu_top});
  FillGaussian(cpu_layer->blobs()[0].get());
  gpu_layer->blobs()[0]->CopyFrom(*cpu_layer->blobs()[0]);
  cpu_layer->Forward({}, {&cpu_top});
  gpu_layer->Forward({}, {&gpu_top});
  ASSERT_EQ(gpu_top.shape(), (std::vector<int>{3, 4, 5}));
  for (int i = 0; i < cpu_top.count(); ++i) {
    ASSERT_EQ(gpu_top.cpu_data()[i], cpu_layer->blobs()[0]->cpu_data()[i]) << i;
  }
}

TEST(ParameterGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1);
  auto layer = CreateLayer(LayerParam(kParameterText), &ctx);
  Tensor top;
  layer->Initialize({}, {&top});
  FillGaussian(layer->blobs()[0].get());
  GradientChecker().Check(layer.get(), {}, {&top});
}

TEST(Im2colGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  struct Case {
    const char* fields;
    std::vector<int> shape;
  };
  const Case cases[] = {
      {"kernel_size: 3 stride: 2 pad: 1", {2, 3, 7, 6}},
      {"kernel_h: 2 kernel_w: 3 stride_h: 1 stride_w: 2 pad_w: 1", {2, 2, 5, 6}},
      {"kernel_size: 3 dilation: 2 pad: 2", {2, 3, 8, 8}},
      {"kernel_size: 3 stride: 2 pad: 1 force_nd_im2col: true", {2, 3, 7, 6}},
      {"axis: 2 kernel_size: 2", {2, 3, 2, 5, 4}},
      {"kernel_size: 2 pad: 1 pad: 0 pad: 1 stride: 2", {2, 2, 4, 5, 3}},  // 3-D
      {"kernel_size: 3 stride: 2", {3, 2, 11}},                            // 1-D
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fields);
    CheckGpuMatchesCpu(
        LayerParam(std::string("type: 'Im2col' convolution_param { ") + c.fields + " }"),
        {c.shape});
  }
}

TEST(Im2colGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const char* fields :
       {"kernel_size: 3 stride: 2 pad: 1", "kernel_size: 2 pad: 1 force_nd_im2col: true"}) {
    SCOPED_TRACE(fields);
    Tensor bottom({2, 2, 4, 5});
    FillGaussian(&bottom);
    GpuGradientCheck(std::string("type: 'Im2col' convolution_param { ") + fields + " }", &bottom);
  }
}

}  // namespace
}  // namespace cortado::testing
