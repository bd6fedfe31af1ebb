// SPDX-License-Identifier: Apache-2.0
#include "layers/batch_reindex_layer.hpp"

#include <gtest/gtest.h>

#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::SetData;

std::unique_ptr<Layer> MakeLayer(Context* ctx) {
  return CreateLayer(
      testing::LayerParam("name: 'reindex' type: 'BatchReindex' bottom: 'data' bottom: 'idx'"),
      ctx);
}

TEST(BatchReindexLayerTest, TopHasOneRowPerIndex) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Tensor data({5, 2, 3}), index({4}), top;
  layer->Initialize({&data, &index}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{4, 2, 3}));
  EXPECT_TRUE(layer->AllowForceBackward(0));
  EXPECT_FALSE(layer->AllowForceBackward(1));
  // The batch may grow as well as shrink.
  Tensor more({7});
  layer->Reshape({&data, &more}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{7, 2, 3}));
}

TEST(BatchReindexLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Tensor data({3, 2}), index({4}), top;
  SetData(&data, {1, 2, 3, 4, 5, 6});
  SetData(&index, {2, 0, 2, 1.7f});  // repeats; 1.7 picks row 1
  layer->Initialize({&data, &index}, {&top});
  layer->Forward({&data, &index}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{5, 6, 1, 2, 5, 6, 3, 4}));
  SetData(&data, {0, 0, 0, 0, 0, 0});
  std::fill_n(data.mutable_cpu_diff(), 6, 42.0f);  // overwritten, not accumulated into
  const std::vector<float> dtop = {1, 2, 10, 20, 100, 200, 1000, 2000};
  std::copy(dtop.begin(), dtop.end(), top.mutable_cpu_diff());
  layer->Backward({&top}, {true, false}, {&data, &index});
  // Row 0 <- top row 1; row 1 <- top row 3; row 2 <- top rows 0 and 2.
  EXPECT_EQ(Diff(data), (std::vector<float>{10, 20, 1000, 2000, 101, 202}));
}

TEST(BatchReindexLayerTest, RowsNeverPickedGetZeroGradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Tensor data({4, 1}), index({1}), top;
  SetData(&index, {3});
  layer->Initialize({&data, &index}, {&top});
  layer->Forward({&data, &index}, {&top});
  std::fill_n(data.mutable_cpu_diff(), 4, 7.0f);
  top.mutable_cpu_diff()[0] = 5.0f;
  layer->Backward({&top}, {true, false}, {&data, &index});
  EXPECT_EQ(Diff(data), (std::vector<float>{0, 0, 0, 5}));
}

TEST(BatchReindexLayerTest, NoIndicesGiveAnEmptyTop) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Tensor data({3, 2}), index({0}), top;
  layer->Initialize({&data, &index}, {&top});
  EXPECT_EQ(top.shape(), (std::vector<int>{0, 2}));
  layer->Forward({&data, &index}, {&top});
  std::fill_n(data.mutable_cpu_diff(), 6, 1.0f);
  layer->Backward({&top}, {true, false}, {&data, &index});
  EXPECT_EQ(data.asum_diff(), 0.0f);
}

TEST(BatchReindexLayerTest, Gradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Tensor data({4, 3, 2}), index({6}), top;
  testing::FillGaussian(&data, 0.0f, 1.0f, 3);
  SetData(&index, {3, 0, 3, 1, 3, 0});  // row 2 unused, row 3 thrice
  testing::GradientCheckOptions options;
  options.check_bottoms = {0};
  testing::GradientChecker(options).Check(layer.get(), {&data, &index}, {&top});
}

void ExpectError(const std::vector<int>& index_shape, const std::vector<float>& indices,
                 const std::string& needle) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Tensor data({3, 2}), index(index_shape), top;
  if (!indices.empty()) SetData(&index, indices);
  try {
    layer->Initialize({&data, &index}, {&top});
    layer->Forward({&data, &index}, {&top});
    FAIL() << "no error; wanted " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("layer 'reindex' (BatchReindex)"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(BatchReindexLayerTest, IndexOutOfRangeIsAnError) {
  ExpectError({3}, {0, 3, 1}, "index 3 at position 1 of the indices is outside the batch [0, 3)");
  ExpectError({2}, {-1, 0}, "index -1 at position 0");
  ExpectError({1}, {-0.5f}, "index -0.5 at position 0");  // Caffe compares the value itself
}

TEST(BatchReindexLayerTest, IndicesMustBeOneDimensional) { ExpectError({2, 1}, {}, "1-D"); }

TEST(BatchReindexLayerTest, NoGradientForTheIndices) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Tensor data({3, 2}), index({2}), top;
  SetData(&index, {0, 1});
  layer->Initialize({&data, &index}, {&top});
  layer->Forward({&data, &index}, {&top});
  EXPECT_THROW(layer->Backward({&top}, {true, true}, {&data, &index}), Error);
}

}  // namespace
}  // namespace cortado
