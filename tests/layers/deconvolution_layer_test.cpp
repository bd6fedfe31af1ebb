// SPDX-License-Identifier: Apache-2.0
#include "layers/deconvolution_layer.hpp"

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

struct DeconvCase {
  const char* name;
  std::vector<int> bottom_shape;  // N, C, spatial...
  int num_output;
  int group;
  std::vector<int> kernel, stride, pad, dilation;  // one per spatial axis
  bool bias = true;
  bool force_nd = false;
};

std::string Join(const char* field, const std::vector<int>& values) {
  std::string s;
  for (int v : values) s += fmt::format("{}: {} ", field, v);
  return s;
}

caffe::LayerParameter CaseParam(const DeconvCase& c) {
  return testing::LayerParam(fmt::format(
      "name: 'deconv' type: 'Deconvolution' convolution_param {{ num_output: {} group: {} "
      "bias_term: {} force_nd_im2col: {} {} {} {} {} "
      "weight_filler {{ type: 'gaussian' std: 0.5 }} bias_filler {{ type: 'gaussian' std: 0.5 }} "
      "}}",
      c.num_output, c.group, c.bias ? "true" : "false", c.force_nd ? "true" : "false",
      Join("kernel_size", c.kernel), Join("stride", c.stride), Join("pad", c.pad),
      Join("dilation", c.dilation)));
}

// The convolution this deconvolution transposes: its input is the deconvolution's top (with
// num_output channels) and its output the deconvolution's bottom.
NaiveConvGeometry TransposedGeometry(const DeconvCase& c, const std::vector<int>& top_shape) {
  std::vector<int> top_spatial(top_shape.begin() + 2, top_shape.end());
  NaiveConvGeometry g =
      NaiveConvGeometry::Make(c.bottom_shape[0], c.num_output, c.bottom_shape[1], c.group,
                              top_spatial, c.kernel, c.stride, c.pad, c.dilation);
  return g;
}

void ExpectAllNear(const float* actual, const std::vector<float>& expected, float tolerance,
                   const std::string& what) {
  for (size_t i = 0; i < expected.size(); ++i) {
    const float scale = std::max(1.0f, std::fabs(expected[i]));
    ASSERT_NEAR(actual[i], expected[i], tolerance * scale) << what << " element " << i;
  }
}

void CheckAgainstReference(const DeconvCase& c) {
  SCOPED_TRACE(c.name);
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(CaseParam(c), &ctx);
  Tensor bottom(c.bottom_shape), top;
  testing::FillGaussian(&bottom, 0.0f, 1.0f, 3);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});

  const NaiveConvGeometry g = TransposedGeometry(c, top.shape());
  // The transposed convolution's output must be the bottom again.
  for (size_t i = 2; i < c.bottom_shape.size(); ++i) {
    ASSERT_EQ(g.out[3 - c.bottom_shape.size() + i], c.bottom_shape[i]);
  }
  const float* w = layer->blobs()[0]->cpu_data();
  // Forward of the deconvolution = backward-data of the convolution, plus the bias.
  std::vector<float> expected;
  g.Backward(top.cpu_data(), w, bottom.cpu_data(), &expected, nullptr, nullptr);
  ASSERT_EQ(top.count(), static_cast<int>(expected.size()));
  if (c.bias) {
    const int spatial = top.count(2);
    const float* b = layer->blobs()[1]->cpu_data();
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += b[(i / spatial) % c.num_output];
  }
  ExpectAllNear(top.cpu_data(), expected, 1e-4f, "top");

  Tensor dy(top.shape());
  testing::FillGaussian(&dy, 0.0f, 1.0f, 5);
  math::Copy(top.count(), dy.cpu_data(), top.mutable_cpu_diff());
  for (auto& blob : layer->blobs()) math::Set(blob->count(), 0.0f, blob->mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  // Bottom diff = the convolution's forward of the top diff; weight diff = the convolution's
  // weight gradient with the top diff as input and the bottom as output gradient.
  ExpectAllNear(bottom.cpu_diff(), g.Forward(dy.cpu_data(), w, nullptr), 1e-4f, "bottom diff");
  std::vector<float> dw;
  g.Backward(dy.cpu_data(), w, bottom.cpu_data(), nullptr, &dw, nullptr);
  ExpectAllNear(layer->blobs()[0]->cpu_diff(), dw, 1e-4f, "weight diff");
  if (c.bias) {
    std::vector<float> db(c.num_output, 0.0f);
    const int spatial = top.count(2);
    for (int i = 0; i < top.count(); ++i) db[(i / spatial) % c.num_output] += dy.cpu_data()[i];
    ExpectAllNear(layer->blobs()[1]->cpu_diff(), db, 1e-4f, "bias diff");
  }
}

const std::vector<DeconvCase>& SmallCases() {
  static const std::vector<DeconvCase> cases = {
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

TEST(DeconvolutionLayerTest, MatchesTransposedNaiveConvolution) {
  for (const DeconvCase& c : SmallCases()) CheckAgainstReference(c);
  // Images big enough that the batch of 5 runs as GEMM chunks of 2, 2 and 1 (72 x 784
  // floats of columns per image against a 128 K-float block).
  CheckAgainstReference({"chunked", {5, 4, 28, 28}, 8, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}});
}

TEST(DeconvolutionLayerTest, GradientCheck) {
  for (const DeconvCase& c : SmallCases()) {
    SCOPED_TRACE(c.name);
    Context ctx(Device::Cpu(), 1701);
    auto layer = CreateLayer(CaseParam(c), &ctx);
    Tensor bottom(c.bottom_shape), top;
    testing::FillGaussian(&bottom, 0.0f, 1.0f, 7);
    testing::GradientChecker checker;
    checker.Check(layer.get(), {&bottom}, {&top});
  }
}

TEST(DeconvolutionLayerTest, ShapesAndBlobs) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'up' type: 'Deconvolution' convolution_param { num_output: 6 "
                          "kernel_size: 4 stride: 2 pad: 1 group: 3 }"),
      &ctx);
  Tensor bottom(std::vector<int>{2, 3, 5, 7}), top;
  layer->Initialize({&bottom}, {&top});
  // (5 - 1) * 2 - 2 + 4 = 10 and (7 - 1) * 2 - 2 + 4 = 14.
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 6, 10, 14}));
  // Caffe's layout: [channels, num_output / group, kernel...].
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{3, 2, 4, 4}));
  EXPECT_EQ(layer->blobs()[1]->shape(), (std::vector<int>{6}));

  auto dilated = CreateLayer(
      testing::LayerParam("name: 'up' type: 'Deconvolution' convolution_param { num_output: 1 "
                          "kernel_h: 3 kernel_w: 1 stride_h: 3 stride_w: 1 dilation: 2 "
                          "bias_term: false }"),
      &ctx);
  Tensor b2(std::vector<int>{1, 2, 4, 4}), t2;
  dilated->Initialize({&b2}, {&t2});
  // Height: (4 - 1) * 3 + 2 * 2 + 1 = 14; width: (4 - 1) * 1 + 1 = 4.
  EXPECT_EQ(t2.shape(), (std::vector<int>{1, 1, 14, 4}));
  EXPECT_EQ(dilated->blobs().size(), 1u);
}

void RunByHand(const std::string& geometry, const std::vector<float>& expected, int side) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'up' type: 'Deconvolution' convolution_param { num_output: 1 "
                          "bias_term: false " +
                          geometry + " }"),
      &ctx);
  Tensor bottom(std::vector<int>{1, 1, 2, 2}), top;
  for (int i = 0; i < 4; ++i) bottom.mutable_cpu_data()[i] = static_cast<float>(i + 1);
  layer->Initialize({&bottom}, {&top});
  const float w[] = {1, 2, 3, 4};
  std::copy(w, w + 4, layer->blobs()[0]->mutable_cpu_data());
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{1, 1, side, side}));
  for (int i = 0; i < side * side; ++i) EXPECT_FLOAT_EQ(top.cpu_data()[i], expected[i]) << i;
}

TEST(DeconvolutionLayerTest, ForwardByHand) {
  // x = [1 2; 3 4], w = [1 2; 3 4]. Each input pixel stamps x * w onto the output at its
  // position times the stride. Stride 1 (overlapping stamps, a full convolution):
  // [1, 1*2+2*1, 2*2; 1*3+3*1, 1*4+2*3+3*2+4*1, 2*4+4*2; 3*3, 3*4+4*3, 4*4].
  RunByHand("kernel_size: 2", {1, 4, 4, 6, 20, 16, 9, 24, 16}, 3);
  // Stride 2: the stamps do not overlap, a 4x4 output of 2x2 blocks x[i][j] * w.
  RunByHand("kernel_size: 2 stride: 2", {1, 2, 2, 4, 3, 4, 6, 8, 3, 6, 4, 8, 9, 12, 12, 16}, 4);
  // Stride 2 with pad 1 crops one pixel from each border of the 4x4 above.
  RunByHand("kernel_size: 2 stride: 2 pad: 1", {4, 6, 6, 4}, 2);
}

TEST(DeconvolutionLayerTest, ForwardBiasByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      testing::LayerParam("name: 'up' type: 'Deconvolution' convolution_param { num_output: 2 "
                          "kernel_size: 1 weight_filler { type: 'constant' value: 2 } "
                          "bias_filler { type: 'constant' value: 0.25 } }"),
      &ctx);
  Tensor bottom(std::vector<int>{1, 1, 1, 2}), top;
  bottom.mutable_cpu_data()[0] = 1.0f;
  bottom.mutable_cpu_data()[1] = -3.0f;
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // Both output channels: 2 * x + 0.25.
  const std::vector<float> expected = {2.25f, -5.75f, 2.25f, -5.75f};
  ASSERT_EQ(top.count(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(top.cpu_data()[i], expected[i]) << i;
}

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
      CreateLayer(testing::LayerParam("name: 'bad' type: 'Deconvolution' convolution_param { " +
                                      conv_param + " }"),
                  &ctx);
  Tensor bottom(shape), top;
  layer->Initialize({&bottom}, {&top});
}

TEST(DeconvolutionLayerTest, BadParameters) {
  ExpectInvalid(
      [] {
        SetupWith("num_output: 3 kernel_size: 2 group: 2", {1, 4, 3, 3});
      },
      {"'bad'", "Deconvolution", "num_output 3", "group 2"});
  ExpectInvalid(
      [] {
        SetupWith("num_output: 2 kernel_size: 2 group: 2", {1, 3, 3, 3});
      },
      {"'bad'", "1 3 3 3", "group 2"});
  // Output (1 - 1) * 1 + 1 - 2 * 1 = -1.
  ExpectInvalid(
      [] {
        SetupWith("num_output: 1 kernel_size: 1 pad: 1", {1, 1, 1, 4});
      },
      {"'bad'", "output size -1", "1 4"});
}

}  // namespace
}  // namespace cortado
