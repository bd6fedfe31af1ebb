// SPDX-License-Identifier: Apache-2.0
#include "layers/embed_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

std::string EmbedText(int num_output, int input_dim, bool bias = true) {
  return fmt::format(
      "name: 'emb' type: 'Embed' embed_param {{ num_output: {} input_dim: {} bias_term: {} "
      "weight_filler {{ type: 'gaussian' std: 1 }} bias_filler {{ type: 'gaussian' std: 1 }} }}",
      num_output, input_dim, bias ? "true" : "false");
}

// W[i, d] = 10 i + d, b[d] = 0.5 d.
void SetTable(Layer* layer, int input_dim, int num_output) {
  float* w = layer->blobs()[0]->mutable_cpu_data();
  for (int i = 0; i < input_dim; ++i) {
    for (int d = 0; d < num_output; ++d) w[i * num_output + d] = 10.0f * i + d;
  }
  if (layer->blobs().size() > 1) {
    float* b = layer->blobs()[1]->mutable_cpu_data();
    for (int d = 0; d < num_output; ++d) b[d] = 0.5f * d;
  }
}

// Expects `body` to throw kInvalidArgument whose message contains every one of `parts`.
void ExpectError(const std::function<void()>& body, const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << e.what();
  }
}

TEST(EmbedLayerTest, ShapesOfTopAndBlobs) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(EmbedText(4, 7)), &ctx);
  Tensor bottom({2, 3}), top;
  layer->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 3, 4}));
  ASSERT_EQ(layer->blobs().size(), 2u);
  EXPECT_EQ(layer->blobs()[0]->shape(), (std::vector<int>{7, 4}));  // input_dim x num_output
  EXPECT_EQ(layer->blobs()[1]->shape(), (std::vector<int>{4}));

  // Any bottom shape, even a scalar: the top appends num_output.
  Tensor scalar(std::vector<int>{}), top2;
  auto layer2 = CreateLayer(LayerParam(EmbedText(5, 3, false)), &ctx);
  layer2->Initialize({&scalar}, {&top2});
  EXPECT_EQ(top2.shape(), (std::vector<int>{5}));
  EXPECT_EQ(layer2->blobs().size(), 1u);
  Tensor four({2, 1, 2, 3}), top3;
  layer2->Reshape({&four}, {&top3});
  EXPECT_EQ(top3.shape(), (std::vector<int>{2, 1, 2, 3, 5}));
}

TEST(EmbedLayerTest, FillersDefaultToZeroAndFollowTheParams) {
  Context ctx(Device::Cpu(), 1701);
  auto plain = CreateLayer(
      LayerParam("name: 'emb' type: 'Embed' embed_param { num_output: 3 input_dim: 2 }"), &ctx);
  Tensor bottom({1}), top;
  plain->Initialize({&bottom}, {&top});
  for (const auto& blob : plain->blobs()) {
    for (int i = 0; i < blob->count(); ++i) EXPECT_EQ(blob->cpu_data()[i], 0.0f);
  }
  auto filled = CreateLayer(LayerParam("name: 'emb' type: 'Embed' embed_param { num_output: 3 "
                                       "input_dim: 2 weight_filler { type: 'constant' value: 2 } "
                                       "bias_filler { type: 'constant' value: -1 } }"),
                            &ctx);
  filled->Initialize({&bottom}, {&top});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(filled->blobs()[0]->cpu_data()[i], 2.0f);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(filled->blobs()[1]->cpu_data()[i], -1.0f);
}

TEST(EmbedLayerTest, ForwardPicksRowsAndAddsTheBias) {
  Context ctx(Device::Cpu(), 1701);
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    auto layer = CreateLayer(LayerParam(EmbedText(3, 5, bias)), &ctx);
    Tensor bottom({2, 2}), top;
    testing::SetData(&bottom, {4, 0, 2, 4});
    layer->Initialize({&bottom}, {&top});
    SetTable(layer.get(), 5, 3);
    layer->Forward({&bottom}, {&top});
    const std::vector<int> indices = {4, 0, 2, 4};
    for (int n = 0; n < 4; ++n) {
      for (int d = 0; d < 3; ++d) {
        const float expected = 10.0f * indices[n] + d + (bias ? 0.5f * d : 0.0f);
        EXPECT_EQ(top.cpu_data()[n * 3 + d], expected) << n << " " << d;
      }
    }
  }
}

TEST(EmbedLayerTest, BackwardAccumulatesRepeatedIndicesAndOntoExistingDiffs) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(EmbedText(2, 4)), &ctx);
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {1, 3, 1});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  float* dy = top.mutable_cpu_diff();
  const float top_diff[6] = {1, 2, 3, 4, 5, 6};  // rows: position 0, 1, 2
  for (int i = 0; i < 6; ++i) dy[i] = top_diff[i];
  Tensor& weights = *layer->blobs()[0];
  Tensor& bias = *layer->blobs()[1];
  std::fill_n(weights.mutable_cpu_diff(), weights.count(), 0.0f);
  std::fill_n(bias.mutable_cpu_diff(), bias.count(), 100.0f);  // Backward adds to it
  layer->Backward({&top}, {false}, {&bottom});
  // Row 1 gets positions 0 and 2: (1 + 5, 2 + 6); row 3 gets position 1: (3, 4).
  const std::vector<float> expected_dw = {0, 0, 6, 8, 0, 0, 3, 4};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(weights.cpu_diff()[i], expected_dw[i]) << i;
  EXPECT_EQ(bias.cpu_diff()[0], 100.0f + 1 + 3 + 5);
  EXPECT_EQ(bias.cpu_diff()[1], 100.0f + 2 + 4 + 6);

  // Frozen parameters get nothing.
  std::fill_n(weights.mutable_cpu_diff(), weights.count(), 0.0f);
  std::fill_n(bias.mutable_cpu_diff(), bias.count(), 0.0f);
  layer->set_param_propagate_down(0, false);
  layer->set_param_propagate_down(1, false);
  layer->Backward({&top}, {false}, {&bottom});
  EXPECT_EQ(weights.asum_diff(), 0.0f);
  EXPECT_EQ(bias.asum_diff(), 0.0f);
}

class EmbedGradientTest : public ::testing::TestWithParam<bool> {};

TEST_P(EmbedGradientTest, ParameterGradientsMatchNumeric) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(EmbedText(4, 6, GetParam())), &ctx);
  Tensor bottom({2, 5}), top;
  // Every index at least once, some repeated.
  testing::SetData(&bottom, {0, 1, 2, 3, 4, 5, 1, 1, 4, 0});
  testing::GradientCheckOptions options;
  options.check_bottoms = {-1};  // no bottom: indices have no gradient
  testing::GradientChecker(options).Check(layer.get(), {&bottom}, {&top});
}

INSTANTIATE_TEST_SUITE_P(Bias, EmbedGradientTest, ::testing::Values(true, false));

TEST(EmbedLayerTest, IndexOutsideTheTableOrNotAnIntegerIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(EmbedText(2, 5)), &ctx);
  Tensor bottom({3}), top;
  layer->Initialize({&bottom}, {&top});
  struct Case {
    float value;
    std::string shown;
  };
  for (const Case& c : std::vector<Case>{{5.0f, "value 5 "},
                                         {-1.0f, "value -1 "},
                                         {2.5f, "value 2.5 "},
                                         {std::numeric_limits<float>::quiet_NaN(), "value nan "}}) {
    SCOPED_TRACE(c.shown);
    testing::SetData(&bottom, {0, 4, c.value});
    ExpectError([&] { layer->Forward({&bottom}, {&top}); },
                {"layer 'emb' (Embed)", c.shown, "position 2", "[0, 5)"});
  }
  testing::SetData(&bottom, {0, 4, 4});
  EXPECT_NO_THROW(layer->Forward({&bottom}, {&top}));
}

TEST(EmbedLayerTest, GradientToTheIndicesIsRefused) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(EmbedText(2, 5)), &ctx);
  Tensor bottom({3}), top;
  testing::SetData(&bottom, {0, 1, 2});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  ExpectError([&] { layer->Backward({&top}, {true}, {&bottom}); },
              {"layer 'emb' (Embed)", "cannot backpropagate to the bottom"});
  EXPECT_FALSE(layer->AllowForceBackward(0));
}

TEST(EmbedLayerTest, BadParametersAndBlobsAreErrors) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom({3}), top;
  auto no_output =
      CreateLayer(LayerParam("name: 'emb' type: 'Embed' embed_param { input_dim: 3 }"), &ctx);
  ExpectError([&] { no_output->Initialize({&bottom}, {&top}); },
              {"layer 'emb' (Embed)", "num_output"});
  auto no_input =
      CreateLayer(LayerParam("name: 'emb' type: 'Embed' embed_param { num_output: 3 }"), &ctx);
  ExpectError([&] { no_input->Initialize({&bottom}, {&top}); },
              {"layer 'emb' (Embed)", "input_dim"});

  // Weights from a model in InnerProduct's orientation (num_output x input_dim) do not fit.
  auto layer = CreateLayer(LayerParam(EmbedText(2, 5)), &ctx);
  layer->blobs().push_back(std::make_shared<Tensor>(std::vector<int>{2, 5}));
  layer->blobs().push_back(std::make_shared<Tensor>(std::vector<int>{2}));
  ExpectError([&] { layer->Initialize({&bottom}, {&top}); },
              {"layer 'emb' (Embed)", "weights have shape 2 5 (10), expected 5 2"});
}

}  // namespace
}  // namespace cortado
