// SPDX-License-Identifier: Apache-2.0
#include "layers/spp_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::LayerParam;

std::string SppText(int height, const std::string& pool = "MAX") {
  return fmt::format("name: 'spp' type: 'SPP' spp_param {{ pyramid_height: {} pool: {} }}", height,
                     pool);
}

// Distinct values 0.1 apart in a seeded random order (no ties for MAX, none within the
// gradient checker's step).
void FillDistinct(Tensor* t, unsigned seed = 3) {
  std::vector<float> values(t->count());
  std::iota(values.begin(), values.end(), 0.0f);
  std::shuffle(values.begin(), values.end(), std::mt19937(seed));
  for (float& v : values) v = 0.1f * v - 1.0f;
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

TEST(SPPLayerTest, LevelPoolingFollowsCaffesFormula) {
  // kernel = ceil(side / bins), pad = (kernel * bins - side + 1) / 2, stride = kernel.
  struct Case {
    int level, h, w, kernel_h, kernel_w, pad_h, pad_w;
  };
  for (const Case& c : std::vector<Case>{{0, 9, 8, 9, 8, 0, 0},
                                         {1, 9, 8, 5, 4, 1, 0},
                                         {2, 9, 8, 3, 2, 2, 0},
                                         {1, 5, 3, 3, 2, 1, 1},
                                         {2, 13, 6, 4, 2, 2, 1},
                                         {3, 16, 17, 2, 3, 0, 4}}) {
    SCOPED_TRACE(fmt::format("level {} of {} x {}", c.level, c.h, c.w));
    const caffe::PoolingParameter p =
        SPPLayer::LevelPooling(c.level, c.h, c.w, caffe::SPPParameter::AVE);
    EXPECT_EQ(p.kernel_h(), static_cast<unsigned>(c.kernel_h));
    EXPECT_EQ(p.kernel_w(), static_cast<unsigned>(c.kernel_w));
    EXPECT_EQ(p.stride_h(), static_cast<unsigned>(c.kernel_h));
    EXPECT_EQ(p.stride_w(), static_cast<unsigned>(c.kernel_w));
    EXPECT_EQ(p.pad_h(), static_cast<unsigned>(c.pad_h));
    EXPECT_EQ(p.pad_w(), static_cast<unsigned>(c.pad_w));
    EXPECT_EQ(p.pool(), caffe::PoolingParameter::AVE);
  }
  EXPECT_EQ(SPPLayer::LevelPooling(1, 4, 4, caffe::SPPParameter::MAX).pool(),
            caffe::PoolingParameter::MAX);
  EXPECT_EQ(SPPLayer::LevelPooling(1, 4, 4, caffe::SPPParameter::STOCHASTIC).pool(),
            caffe::PoolingParameter::STOCHASTIC);
}

TEST(SPPLayerTest, TopIsTheFlattenedLevelsOrOneLevelKeptFourD) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom({2, 3, 9, 8});
  FillDistinct(&bottom);
  for (int height : {2, 3}) {
    auto layer = CreateLayer(LayerParam(SppText(height)), &ctx);
    Tensor top;
    layer->Initialize({&bottom}, {&top});
    const int bins = height == 2 ? 1 + 4 : 1 + 4 + 16;
    EXPECT_EQ(top.shape(), (std::vector<int>{2, 3 * bins})) << height;
  }
  // pyramid_height 1: the single Pooling's top, not flattened (Caffe's special case).
  auto one = CreateLayer(LayerParam(SppText(1)), &ctx);
  Tensor top;
  one->Initialize({&bottom}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{2, 3, 1, 1}));
  one->Forward({&bottom}, {&top});
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 3; ++c) {
      const float* plane = bottom.cpu_data() + bottom.offset(n, c);
      EXPECT_EQ(top.data_at(n, c, 0, 0), *std::max_element(plane, plane + 72)) << n << " " << c;
    }
  }
}

// x[c][h][w] of a 1 x 2 x 3 x 3 bottom.
const std::vector<float> kInput = {
    1,  7,  2,   //
    4,  0,  9,   //
    3,  5,  8,   //
    -1, -6, -2,  //
    -3, -9, -4,  //
    -8, -5, -7,
};

TEST(SPPLayerTest, MaxForwardByHandWithPadding) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(SppText(2)), &ctx);
  Tensor bottom({1, 2, 3, 3}), top;
  testing::SetData(&bottom, kInput);
  layer->Initialize({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{1, 10}));
  layer->Forward({&bottom}, {&top});
  // Level 0: the max of each channel. Level 1: kernel 2, stride 2, pad (4 - 3 + 1) / 2 = 1, so
  // the bins cover rows {0}, {1, 2} and columns {0}, {1, 2}.
  const std::vector<float> expected = {9,  -1,           // level 0, channels 0 and 1
                                       1,  7,  4,  9,    // level 1, channel 0
                                       -1, -2, -3, -4};  // level 1, channel 1
  for (int i = 0; i < 10; ++i) EXPECT_EQ(top.cpu_data()[i], expected[i]) << i;
}

TEST(SPPLayerTest, AveForwardByHandCountsThePadding) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(SppText(2, "AVE")), &ctx);
  Tensor bottom({1, 2, 3, 3}), top;
  testing::SetData(&bottom, kInput);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // Level 1 bins are 2 x 2 windows of the padded image: Caffe divides by 4 also where a window
  // overlaps the padding.
  const std::vector<float> expected = {
      39.0f / 9, -45.0f / 9,  //
      1.0f / 4,  (7 + 2) / 4.0f,  (4 + 3) / 4.0f,  (0 + 9 + 5 + 8) / 4.0f,
      -1.0f / 4, (-6 - 2) / 4.0f, (-3 - 8) / 4.0f, (-9 - 4 - 5 - 7) / 4.0f};
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(top.cpu_data()[i], expected[i], 1e-6f) << i;
}

TEST(SPPLayerTest, BackwardSumsTheLevelsIntoTheBottom) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(SppText(2)), &ctx);
  Tensor bottom({1, 1, 2, 2}), top;
  testing::SetData(&bottom, {3, 1, 2, 0});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.count(), 5);
  // Level 0 (the max, 3) gets 10; level 1 bins are the single pixels.
  const std::vector<float> dy = {10, 1, 2, 3, 4};
  std::copy(dy.begin(), dy.end(), top.mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  const std::vector<float> expected = {11, 2, 3, 4};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(bottom.cpu_diff()[i], expected[i]) << i;
}

class SPPGradientTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(SPPGradientTest, GradientMatchesNumeric) {
  Context ctx(Device::Cpu(), 1701);
  const auto& [height, pool] = GetParam();
  auto layer = CreateLayer(LayerParam(SppText(height, pool)), &ctx);
  Tensor bottom({2, 2, 6, 7}), top;
  FillDistinct(&bottom);
  testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
}

INSTANTIATE_TEST_SUITE_P(Levels, SPPGradientTest,
                         ::testing::Combine(::testing::Values(1, 2, 3),
                                            ::testing::Values("MAX", "AVE")));

TEST(SPPLayerTest, ReshapeToANewSizeRebuildsTheLevels) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(SppText(2)), &ctx);
  Tensor bottom({1, 2, 3, 3}), top;
  testing::SetData(&bottom, kInput);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  // Now 3 images of 2 channels of 2 x 2 pixels: level 1 has kernel 1, stride 1, pad 0, so its
  // bins are the pixels themselves.
  Tensor small({3, 2, 2, 2});
  FillDistinct(&small);
  layer->Reshape({&small}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{3, 10}));
  layer->Forward({&small}, {&top});
  for (int n = 0; n < 3; ++n) {
    for (int c = 0; c < 2; ++c) {
      const float* plane = small.cpu_data() + small.offset(n, c);
      EXPECT_EQ(top.data_at(n, c), *std::max_element(plane, plane + 4));
      for (int i = 0; i < 4; ++i) EXPECT_EQ(top.data_at(n, 2 + c * 4 + i), plane[i]);
    }
  }
  // And back: the first shape gives the first numbers again.
  layer->Reshape({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{1, 10}));
  EXPECT_EQ(top.cpu_data()[2], 1.0f);
  EXPECT_EQ(top.cpu_data()[5], 9.0f);
}

void ExpectError(Layer* layer, Tensor* bottom, ErrorCode code,
                 const std::vector<std::string>& parts) {
  Tensor top;
  try {
    layer->Initialize({bottom}, {&top});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << e.what();
    }
  }
}

TEST(SPPLayerTest, BadParametersAndShapesAreErrors) {
  Context ctx(Device::Cpu(), 1701);
  Tensor image({1, 2, 8, 8});
  auto none = CreateLayer(LayerParam("name: 'spp' type: 'SPP' spp_param { pool: AVE }"), &ctx);
  ExpectError(none.get(), &image, ErrorCode::kInvalidArgument,
              {"layer 'spp' (SPP)", "pyramid_height", "got 0"});

  Tensor three_d({2, 8, 8});
  auto layer = CreateLayer(LayerParam(SppText(2)), &ctx);
  ExpectError(layer.get(), &three_d, ErrorCode::kInvalidArgument,
              {"layer 'spp' (SPP)", "4-D", "2 8 8"});

  // A 3-pixel side in 4 bins: kernel 1, pad 1; Pooling needs pad < kernel (Caffe aborts).
  Tensor small({1, 1, 3, 8});
  auto deep = CreateLayer(LayerParam(SppText(3)), &ctx);
  ExpectError(deep.get(), &small, ErrorCode::kInvalidArgument,
              {"layer 'spp' (SPP): pyramid level 2", "pad"});

  // STOCHASTIC runs only where Pooling runs it: on a GPU context.
  auto stochastic = CreateLayer(LayerParam(SppText(2, "STOCHASTIC")), &ctx);
  ExpectError(stochastic.get(), &image, ErrorCode::kUnimplemented,
              {"layer 'spp' (SPP): pyramid level 0", "STOCHASTIC"});
}

}  // namespace
}  // namespace cortado
