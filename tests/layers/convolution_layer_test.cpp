// SPDX-License-Identifier: Apache-2.0
#include "layers/convolution_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "layers/naive_convolution.hpp"
#include "math/math.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::NaiveConvGeometry;

// A convolution configuration for the reference and gradient tests.
struct ConvCase {
  const char* name;
  std::vector<int> bottom_shape;  // N, C, spatial... (with axis 2: two sample axes first)
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

// Writes the geometry with the repeated fields, one value per axis.
// `engine` CAFFE forces im2col + GEMM; DEFAULT takes the fast CPU path where it applies.
caffe::LayerParameter CaseParam(const ConvCase& c, const char* engine) {
  return testing::LayerParam(fmt::format(
      "name: 'conv' type: 'Convolution' convolution_param {{ num_output: {} group: {} "
      "bias_term: {} force_nd_im2col: {} axis: {} engine: {} {} {} {} {} "
      "weight_filler {{ type: 'gaussian' std: 0.5 }} bias_filler {{ type: 'gaussian' std: 0.5 }} "
      "}}",
      c.num_output, c.group, c.bias ? "true" : "false", c.force_nd ? "true" : "false", c.axis,
      engine, Join("kernel_size", c.kernel), Join("stride", c.stride), Join("pad", c.pad),
      Join("dilation", c.dilation)));
}

NaiveConvGeometry CaseGeometry(const ConvCase& c) {
  int num = 1;
  for (int i = 0; i < c.axis; ++i) num *= c.bottom_shape[i];
  std::vector<int> spatial(c.bottom_shape.begin() + c.axis + 1, c.bottom_shape.end());
  return NaiveConvGeometry::Make(num, c.bottom_shape[c.axis], c.num_output, c.group, spatial,
                                 c.kernel, c.stride, c.pad, c.dilation);
}

void ExpectAllNear(const float* actual, const std::vector<float>& expected, float tolerance,
                   const std::string& what) {
  for (size_t i = 0; i < expected.size(); ++i) {
    const float scale = std::max(1.0f, std::fabs(expected[i]));
    ASSERT_NEAR(actual[i], expected[i], tolerance * scale) << what << " element " << i;
  }
}

// Forward and backward of the layer against the direct-loop reference.
void CheckAgainstReference(const ConvCase& c, const char* engine) {
  SCOPED_TRACE(std::string(c.name) + " engine " + engine);
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(CaseParam(c, engine), &ctx);
  Tensor bottom(c.bottom_shape), top;
  testing::FillGaussian(&bottom, 0.0f, 1.0f, 3);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});

  const NaiveConvGeometry g = CaseGeometry(c);
  const float* w = layer->blobs()[0]->cpu_data();
  const float* b = c.bias ? layer->blobs()[1]->cpu_data() : nullptr;
  const std::vector<float> expected = g.Forward(bottom.cpu_data(), w, b);
  ASSERT_EQ(top.count(), static_cast<int>(expected.size()));
  ExpectAllNear(top.cpu_data(), expected, 1e-4f, "top");

  // Backward with random top diffs; parameter diffs start at zero and accumulate.
  Tensor dy(top.shape());
  testing::FillGaussian(&dy, 0.0f, 1.0f, 5);
  math::Copy(top.count(), dy.cpu_data(), top.mutable_cpu_diff());
  for (auto& blob : layer->blobs()) math::Set(blob->count(), 0.0f, blob->mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  std::vector<float> dx, dw, db;
  g.Backward(bottom.cpu_data(), w, dy.cpu_data(), &dx, &dw, &db);
  ExpectAllNear(bottom.cpu_diff(), dx, 1e-4f, "bottom diff");
  // Weight and bias diffs sum thousands of products (7,220 in the chunked case); engines add
  // them in different orders, so allow float rounding of such sums.
  ExpectAllNear(layer->blobs()[0]->cpu_diff(), dw, 1e-3f, "weight diff");
  if (c.bias) ExpectAllNear(layer->blobs()[1]->cpu_diff(), db, 1e-3f, "bias diff");
}

void CheckGradient(const ConvCase& c, const char* engine) {
  SCOPED_TRACE(std::string(c.name) + " engine " + engine);
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(CaseParam(c, engine), &ctx);
  Tensor bottom(c.bottom_shape), top;
  testing::FillGaussian(&bottom, 0.0f, 1.0f, 7);
  testing::GradientChecker checker;
  checker.Check(layer.get(), {&bottom}, {&top});
}

// Small configurations covering each feature; the reference test also runs large ones.
const std::vector<ConvCase>& SmallCases() {
  static const std::vector<ConvCase> cases = {
      {"basic", {2, 3, 5, 6}, 4, 1, {3, 3}, {1, 1}, {0, 0}, {1, 1}},
      {"group", {2, 4, 5, 5}, 6, 2, {3, 3}, {1, 1}, {1, 1}, {1, 1}},
      {"depthwise", {1, 3, 4, 4}, 3, 3, {2, 2}, {1, 1}, {0, 0}, {1, 1}},
      {"stride_pad_rect", {2, 3, 7, 6}, 2, 1, {3, 2}, {2, 3}, {1, 0}, {1, 1}},
      {"dilation", {1, 2, 7, 7}, 3, 1, {3, 3}, {1, 1}, {2, 2}, {2, 2}},
      {"no_bias", {2, 3, 5, 5}, 2, 1, {3, 3}, {2, 2}, {0, 0}, {1, 1}, false},
      {"one_by_one", {3, 4, 3, 3}, 5, 1, {1, 1}, {1, 1}, {0, 0}, {1, 1}},
      {"force_nd", {2, 4, 6, 5}, 2, 2, {3, 2}, {2, 1}, {1, 1}, {1, 2}, true, true},
      {"three_d", {2, 2, 4, 5, 4}, 4, 2, {3, 2, 3}, {1, 2, 1}, {1, 0, 1}, {1, 1, 1}},
      {"three_d_dilated", {1, 2, 5, 5, 5}, 2, 1, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {2, 2, 2}},
      {"axis_2", {2, 2, 3, 5, 5}, 2, 1, {3, 3}, {1, 1}, {0, 0}, {1, 1}, true, false, 2},
      // 32 input channels per group: the fast engine's input-gradient path too.
      {"wide_channels", {2, 32, 4, 4}, 3, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}},
  };
  return cases;
}

const char* const kEngines[] = {"CAFFE", "DEFAULT"};

TEST(ConvolutionLayerTest, MatchesNaiveReference) {
  for (const char* engine : kEngines) {
    for (const ConvCase& c : SmallCases()) CheckAgainstReference(c, engine);
  }
}

TEST(ConvolutionLayerTest, MatchesNaiveReferenceAcrossBatchChunks) {
  // Images whose unrolled columns take 36-49 K floats: the layer puts two images side by side
  // per GEMM (its column block is 128 K floats), so a batch of 5 runs as chunks of 2, 2 and 1
  // (3 as 2 and 1), through the im2col path, the 1x1 path and with groups.
  for (const char* engine : kEngines) {
    CheckAgainstReference({"chunked", {5, 4, 40, 40}, 3, 1, {3, 3}, {1, 1}, {0, 0}, {1, 1}},
                          engine);
    CheckAgainstReference({"chunked_1x1", {3, 48, 32, 32}, 3, 1, {1, 1}, {1, 1}, {0, 0}, {1, 1}},
                          engine);
    CheckAgainstReference(
        {"chunked_group", {3, 4, 40, 40}, 4, 2, {3, 3}, {1, 1}, {0, 0}, {1, 1}, false}, engine);
  }
}

TEST(ConvolutionLayerTest, GradientCheck) {
  for (const char* engine : kEngines) {
    for (const ConvCase& c : SmallCases()) CheckGradient(c, engine);
  }
}

TEST(ConvolutionLayerTest, ShapesAndBlobs) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(testing::LayerParam("name: 'conv' type: 'Convolution' "
                                               "convolution_param { num_output: 4 kernel_size: 3 "
                                               "pad: 1 stride: 2 }"),
                           &ctx);
  Tensor bottom(std::vector<int>{2, 3, 6, 5}), top;
  layer->Initialize({&bottom}, {&top});
  // (6 + 2 - 3) / 2 + 1 = 3 and (5 + 2 - 3) / 2 + 1 = 3.
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 4, 3, 3}));
  ASSERT_EQ(layer->blobs().size(), 2u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{4, 3, 3, 3}));
  EXPECT_EQ(layer->blobs()[1]->shape(), (std::vector<int>{4}));

  // Reshaping to a new spatial size follows.
  bottom.Reshape(std::vector<int>{1, 3, 9, 9});
  layer->Reshape({&bottom}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{1, 4, 5, 5}));
}

TEST(ConvolutionLayerTest, ShapesWithHWFieldsDilationGroupAndNoBias) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'conv' type: 'Convolution' convolution_param { num_output: 6 "
                          "kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_h: 1 "
                          "dilation: 2 group: 2 bias_term: false }"),
      &ctx);
  Tensor bottom(std::vector<int>{1, 4, 9, 7}), top;
  layer->Initialize({&bottom}, {&top});
  // Height: extent 2*(3-1)+1 = 5, (9 + 2 - 5) / 2 + 1 = 4. Width: extent 3, (7 - 3) / 1 + 1 = 5.
  EXPECT_EQ(top.shape(), (std::vector<int>{1, 6, 4, 5}));
  ASSERT_EQ(layer->blobs().size(), 1u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{6, 2, 3, 2}));
}

TEST(ConvolutionLayerTest, ShapesThreeD) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'conv3d' type: 'Convolution' convolution_param { num_output: 2 "
                          "kernel_size: 3 kernel_size: 1 kernel_size: 2 stride: 2 pad: 1 }"),
      &ctx);
  Tensor bottom(std::vector<int>{2, 3, 5, 4, 6}), top;
  layer->Initialize({&bottom}, {&top});
  // (5+2-3)/2+1 = 3, (4+2-1)/2+1 = 3, (6+2-2)/2+1 = 4.
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 2, 3, 3, 4}));
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{2, 3, 3, 1, 2}));
}

// Sets the weights (and the bias, if given) of a single-channel layer.
void SetParams(Layer* layer, const std::vector<float>& weights, const std::vector<float>& bias) {
  ASSERT_EQ(layer->blobs()[0]->count(), static_cast<int>(weights.size()));
  std::copy(weights.begin(), weights.end(), layer->blobs()[0]->mutable_cpu_data());
  if (!bias.empty()) std::copy(bias.begin(), bias.end(), layer->blobs()[1]->mutable_cpu_data());
}

TEST(ConvolutionLayerTest, ForwardByHand) {
  // x = [1 2 3; 4 5 6; 7 8 9], w = [1 2; 3 4], bias 0.5, stride 1, no pad:
  // y[0][0] = 1*1 + 2*2 + 3*4 + 4*5 = 37, y[0][1] = 1*2 + 2*3 + 3*5 + 4*6 = 47,
  // y[1][0] = 1*4 + 2*5 + 3*7 + 4*8 = 67, y[1][1] = 1*5 + 2*6 + 3*8 + 4*9 = 77; plus 0.5.
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(testing::LayerParam("name: 'conv' type: 'Convolution' "
                                               "convolution_param { num_output: 1 kernel_size: 2 "
                                               "}"),
                           &ctx);
  Tensor bottom(std::vector<int>{1, 1, 3, 3}), top;
  for (int i = 0; i < 9; ++i) bottom.mutable_cpu_data()[i] = static_cast<float>(i + 1);
  layer->Initialize({&bottom}, {&top});
  SetParams(layer.get(), {1, 2, 3, 4}, {0.5f});
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{1, 1, 2, 2}));
  const std::vector<float> expected = {37.5f, 47.5f, 67.5f, 77.5f};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(top.cpu_data()[i], expected[i]) << i;
}

TEST(ConvolutionLayerTest, ForwardByHandWithPadAndStride) {
  // Same x and w, pad 1, stride 2, no bias: windows start at -1 and 1 on each axis, so
  // y[0][0] = 4*x00 = 4, y[0][1] = 3*x01 + 4*x02 = 18, y[1][0] = 2*x10 + 4*x20 = 36,
  // y[1][1] = 1*5 + 2*6 + 3*8 + 4*9 = 77.
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(testing::LayerParam("name: 'conv' type: 'Convolution' "
                                               "convolution_param { num_output: 1 kernel_size: 2 "
                                               "pad: 1 stride: 2 bias_term: false }"),
                           &ctx);
  Tensor bottom(std::vector<int>{1, 1, 3, 3}), top;
  for (int i = 0; i < 9; ++i) bottom.mutable_cpu_data()[i] = static_cast<float>(i + 1);
  layer->Initialize({&bottom}, {&top});
  SetParams(layer.get(), {1, 2, 3, 4}, {});
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{1, 1, 2, 2}));
  const std::vector<float> expected = {4, 18, 36, 77};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(top.cpu_data()[i], expected[i]) << i;
}

TEST(ConvolutionLayerTest, BackwardByHand) {
  // y = conv(x, w) with x 3x3, w 2x2 = [1 2; 3 4], top diff all ones:
  // dw[a][b] = sum of the 2x2 block of x starting at (a, b): [1+2+4+5, 2+3+5+6; 4+5+7+8,
  // 5+6+8+9] = [12 16; 24 28]; dbias = 4; dx[i][j] = sum of the w entries covering (i, j):
  // [1 3 2; 4 10 6; 3 7 4].
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(testing::LayerParam("name: 'conv' type: 'Convolution' "
                                               "convolution_param { num_output: 1 kernel_size: 2 "
                                               "}"),
                           &ctx);
  Tensor bottom(std::vector<int>{1, 1, 3, 3}), top;
  for (int i = 0; i < 9; ++i) bottom.mutable_cpu_data()[i] = static_cast<float>(i + 1);
  layer->Initialize({&bottom}, {&top});
  SetParams(layer.get(), {1, 2, 3, 4}, {0.0f});
  layer->Forward({&bottom}, {&top});
  math::Set(top.count(), 1.0f, top.mutable_cpu_diff());
  for (auto& blob : layer->blobs()) math::Set(blob->count(), 0.0f, blob->mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  const std::vector<float> dw = {12, 16, 24, 28};
  const std::vector<float> dx = {1, 3, 2, 4, 10, 6, 3, 7, 4};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(layer->blobs()[0]->cpu_diff()[i], dw[i]) << i;
  EXPECT_FLOAT_EQ(layer->blobs()[1]->cpu_diff()[0], 4.0f);
  for (int i = 0; i < 9; ++i) EXPECT_FLOAT_EQ(bottom.cpu_diff()[i], dx[i]) << i;

  // A second backward accumulates into the parameter diffs and overwrites the bottom diff.
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_FLOAT_EQ(layer->blobs()[0]->cpu_diff()[0], 24.0f);
  EXPECT_FLOAT_EQ(layer->blobs()[1]->cpu_diff()[0], 8.0f);
  EXPECT_FLOAT_EQ(bottom.cpu_diff()[4], 10.0f);
}

void CheckTwoBottoms(const char* engine);

TEST(ConvolutionLayerTest, MultipleBottomsShareWeights) {
  for (const char* engine : kEngines) {
    SCOPED_TRACE(engine);
    CheckTwoBottoms(engine);
  }
}

void CheckTwoBottoms(const char* engine) {
  Context ctx(Device::Cpu(), 1701);
  ConvCase c = {"two_bottoms", {2, 2, 5, 5}, 3, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}};
  auto layer = CreateLayer(CaseParam(c, engine), &ctx);
  Tensor b0(c.bottom_shape), b1(c.bottom_shape), t0, t1;
  testing::FillGaussian(&b0, 0.0f, 1.0f, 11);
  testing::FillGaussian(&b1, 0.0f, 1.0f, 12);
  layer->Initialize({&b0, &b1}, {&t0, &t1});
  layer->Forward({&b0, &b1}, {&t0, &t1});
  const NaiveConvGeometry g = CaseGeometry(c);
  const float* w = layer->blobs()[0]->cpu_data();
  const float* b = layer->blobs()[1]->cpu_data();
  ExpectAllNear(t0.cpu_data(), g.Forward(b0.cpu_data(), w, b), 1e-4f, "top 0");
  ExpectAllNear(t1.cpu_data(), g.Forward(b1.cpu_data(), w, b), 1e-4f, "top 1");

  // Weight gradients from both bottoms add up.
  auto fresh = CreateLayer(CaseParam(c, engine), &ctx);
  testing::GradientChecker checker;
  checker.Check(fresh.get(), {&b0, &b1}, {&t0, &t1});
}

TEST(ConvolutionLayerTest, PropagateDownFlagsAreRespected) {
  Context ctx(Device::Cpu(), 1701);
  ConvCase c = {"flags", {1, 2, 4, 4}, 2, 1, {3, 3}, {1, 1}, {0, 0}, {1, 1}};
  auto layer = CreateLayer(CaseParam(c, "DEFAULT"), &ctx);
  Tensor bottom(c.bottom_shape), top;
  testing::FillGaussian(&bottom);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  math::Set(top.count(), 1.0f, top.mutable_cpu_diff());
  math::Set(bottom.count(), 7.0f, bottom.mutable_cpu_diff());
  for (auto& blob : layer->blobs()) math::Set(blob->count(), 0.0f, blob->mutable_cpu_diff());
  layer->set_param_propagate_down(0, false);
  layer->Backward({&top}, {false}, {&bottom});
  EXPECT_EQ(bottom.cpu_diff()[0], 7.0f);                    // untouched
  EXPECT_EQ(layer->blobs()[0]->asum_diff(), 0.0f);          // weights skipped
  EXPECT_FLOAT_EQ(layer->blobs()[1]->cpu_diff()[0], 4.0f);  // bias: 2x2 outputs of 1
}

// Runs `fn`, expecting an Error of kInvalidArgument whose message holds every `part`.
void ExpectInvalid(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' missing from: " << e.what();
    }
  }
}

void SetupWith(const std::string& conv_param, const std::vector<int>& shape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer =
      CreateLayer(testing::LayerParam("name: 'bad' type: 'Convolution' convolution_param { " +
                                      conv_param + " }"),
                  &ctx);
  Tensor bottom(shape), top;
  layer->Initialize({&bottom}, {&top});
}

TEST(ConvolutionLayerTest, NumOutputNotDivisibleByGroup) {
  ExpectInvalid(
      [] {
        SetupWith("num_output: 5 kernel_size: 3 group: 2", {1, 4, 5, 5});
      },
      {"'bad'", "Convolution", "num_output 5", "group 2"});
}

TEST(ConvolutionLayerTest, ChannelsNotDivisibleByGroup) {
  ExpectInvalid(
      [] {
        SetupWith("num_output: 4 kernel_size: 3 group: 2", {1, 3, 5, 5});
      },
      {"'bad'", "channels (3", "1 3 5 5", "group 2"});
}

TEST(ConvolutionLayerTest, KernelLargerThanPaddedInput) {
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_size: 6 pad: 0", {1, 1, 5, 5});
      },
      {"'bad'", "kernel extent 6", "padded input 5", "5 5"});
  // Dilation counts: extent 2 * (3 - 1) + 1 = 5 > 3 + 2 * 0.
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_size: 3 dilation: 2", {1, 1, 3, 8});
      },
      {"'bad'", "kernel extent 5", "3 8"});
}

TEST(ConvolutionLayerTest, BadGeometryFields) {
  ExpectInvalid([] { SetupWith("num_output: 1", {1, 1, 5, 5}); }, {"'bad'", "kernel"});
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_size: 3 kernel_h: 3 kernel_w: 3", {1, 1, 5, 5});
      },
      {"'bad'", "not both"});
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_h: 3", {1, 1, 5, 5});
      },
      {"'bad'", "kernel_h and kernel_w"});
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_h: 3 kernel_w: 3", {1, 1, 5, 5, 5});
      },
      {"'bad'", "2-D", "3 spatial axes"});
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_size: 1 kernel_size: 2 kernel_size: 3", {1, 1, 5, 5});
      },
      {"'bad'", "once per spatial axis (2)", "got 3"});
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_size: 0", {1, 1, 5, 5});
      },
      {"'bad'", "kernel must be positive"});
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_size: 3 stride: 0", {1, 1, 5, 5});
      },
      {"'bad'", "stride must be positive"});
  ExpectInvalid([] { SetupWith("kernel_size: 3", {1, 1, 5, 5}); }, {"'bad'", "num_output"});
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_size: 3 axis: 4", {1, 1, 5, 5});
      },
      {"'bad'", "axis 4", "1 1 5 5"});
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_size: 1 axis: 3", {1, 1, 5, 5});
      },
      {"'bad'", "spatial axis"});
}

TEST(ConvolutionLayerTest, BottomsOfDifferentShapes) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(testing::LayerParam("name: 'bad' type: 'Convolution' "
                                               "convolution_param { num_output: 2 kernel_size: 3 "
                                               "}"),
                           &ctx);
  Tensor b0(std::vector<int>{1, 2, 5, 5}), b1(std::vector<int>{1, 2, 6, 5}), t0, t1;
  ExpectInvalid(
      [&] {
        layer->Initialize({&b0, &b1}, {&t0, &t1});
      },
      {"'bad'", "1 2 5 5", "1 2 6 5"});
}

TEST(ConvolutionLayerTest, ChannelCountMayNotChangeOnReshape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(testing::LayerParam("name: 'bad' type: 'Convolution' "
                                               "convolution_param { num_output: 2 kernel_size: 3 "
                                               "}"),
                           &ctx);
  Tensor bottom(std::vector<int>{1, 2, 5, 5}), top;
  layer->Initialize({&bottom}, {&top});
  bottom.Reshape(std::vector<int>{1, 3, 5, 5});
  ExpectInvalid([&] { layer->Reshape({&bottom}, {&top}); }, {"'bad'", "1 3 5 5", "set up for 2"});
  bottom.Reshape(std::vector<int>{2, 5, 5});
  ExpectInvalid([&] { layer->Reshape({&bottom}, {&top}); }, {"'bad'", "2 5 5"});
}

}  // namespace
}  // namespace cortado
