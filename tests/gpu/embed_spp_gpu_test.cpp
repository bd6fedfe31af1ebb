// SPDX-License-Identifier: Apache-2.0
// Embed and SPP on the GPU against the CPU, and their gradient checks there.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/gpu_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {
namespace {

std::string EmbedText(bool bias) {
  return fmt::format(
      "name: 'emb' type: 'Embed' embed_param {{ num_output: 6 input_dim: 7 bias_term: {} "
      "weight_filler {{ type: 'gaussian' std: 1 }} bias_filler {{ type: 'gaussian' std: 1 }} }}",
      bias ? "true" : "false");
}

// Indices in [0, 7), with repeats (so the GPU's atomic adds meet).
void FillIndices(int /*bottom*/, Tensor* t) {
  float* data = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i) data[i] = static_cast<float>((i * 5 + 3) % 7);
}

// Distinct values 0.1 apart in a seeded random order (no ties for MAX pooling).
void FillDistinct(int bottom, Tensor* t) {
  std::vector<float> values(t->count());
  std::iota(values.begin(), values.end(), 0.0f);
  std::shuffle(values.begin(), values.end(), std::mt19937(11 + bottom));
  for (float& v : values) v = 0.1f * v - 2.0f;
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

TEST(EmbedGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    GpuCheckOptions options;
    options.fill_bottom = FillIndices;
    options.propagate_down = {false};  // indices have no gradient
    CheckGpuMatchesCpu(LayerParam(EmbedText(bias)), {{4, 9}}, options);
  }
}

TEST(EmbedGpuTest, WeightGradientCheck) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1);
  auto layer = CreateLayer(LayerParam(EmbedText(true)), &ctx);
  Tensor bottom({3, 5}), top;
  FillIndices(0, &bottom);
  GradientCheckOptions options;
  options.check_bottoms = {-1};  // parameters only
  GradientChecker(options).Check(layer.get(), {&bottom}, {&top});
}

TEST(EmbedGpuTest, BadIndexThrowsAsOnTheCpu) {
  CORTADO_REQUIRE_GPU();
  Context ctx(Device::Cuda(0), 1);
  auto layer = CreateLayer(LayerParam(EmbedText(true)), &ctx);
  Tensor bottom({4}), top;
  FillIndices(0, &bottom);
  layer->Initialize({&bottom}, {&top});
  bottom.mutable_cpu_data()[2] = 7.0f;
  try {
    layer->Forward({&bottom}, {&top});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'emb' (Embed): bottom value 7 at position 2"),
              std::string::npos)
        << e.what();
  }
  bottom.mutable_cpu_data()[2] = 6.0f;
  EXPECT_NO_THROW(layer->Forward({&bottom}, {&top}));
}

std::string SppText(int height, const std::string& pool) {
  return fmt::format("name: 'spp' type: 'SPP' spp_param {{ pyramid_height: {} pool: {} }}", height,
                     pool);
}

TEST(SPPGpuTest, MatchesCpu) {
  CORTADO_REQUIRE_GPU();
  for (const std::string pool : {"MAX", "AVE"}) {
    for (int height : {1, 2, 3}) {
      SCOPED_TRACE(pool + " " + std::to_string(height));
      GpuCheckOptions options;
      options.fill_bottom = FillDistinct;
      CheckGpuMatchesCpu(LayerParam(SppText(height, pool)), {{2, 3, 6, 7}}, options);
    }
  }
}

TEST(SPPGpuTest, GradientCheck) {
  CORTADO_REQUIRE_GPU();
  for (const std::string pool : {"MAX", "AVE"}) {
    SCOPED_TRACE(pool);
    Context ctx(Device::Cuda(0), 1);
    auto layer = CreateLayer(LayerParam(SppText(3, pool)), &ctx);
    Tensor bottom({2, 2, 6, 7}), top;
    FillDistinct(0, &bottom);
    GradientChecker().Check(layer.get(), {&bottom}, {&top});
  }
}

TEST(SPPGpuTest, StochasticRunsWhereNoLevelIsPadded) {
  CORTADO_REQUIRE_GPU();
  // 8 x 8 in 1, 2 and 4 bins: kernels 8, 4, 2, no padding. In TEST, STOCHASTIC pooling gives
  // sum(x^2) / sum(x) per window; level 0 is the whole channel.
  Context ctx(Device::Cuda(0), 1);
  auto layer = CreateLayer(LayerParam("phase: TEST " + SppText(3, "STOCHASTIC")), &ctx);
  Tensor bottom({1, 2, 8, 8}), top;
  FillUniform(&bottom, 0.1f, 1.0f);
  layer->Initialize({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{1, 2 * 21}));
  layer->Forward({&bottom}, {&top});
  for (int c = 0; c < 2; ++c) {
    double sum = 0, sum_sq = 0;
    for (int i = 0; i < 64; ++i) {
      const double x = bottom.cpu_data()[c * 64 + i];
      sum += x;
      sum_sq += x * x;
    }
    EXPECT_NEAR(top.cpu_data()[c], sum_sq / sum, 1e-4) << c;
  }
}

}  // namespace
}  // namespace cortado::testing
