// SPDX-License-Identifier: Apache-2.0
#include "layers/tile_layer.hpp"

#include <gtest/gtest.h>

#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

std::string TileText(const std::string& fields) {
  return "name: 'tile' type: 'Tile' tile_param { " + fields + " }";
}

std::vector<int> TopShape(const std::string& fields, const std::vector<int>& shape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(TileText(fields)), &ctx);
  Tensor bottom(shape), top;
  layer->Initialize({&bottom}, {&top});
  return top.shape();
}

void ExpectTileError(const std::string& text, const std::string& needle) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(text), &ctx);
  Tensor bottom({2, 3, 4}), top;
  try {
    layer->Initialize({&bottom}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer 'tile' (Tile)"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(TileLayerTest, Shapes) {
  // The default axis is 1.
  EXPECT_EQ(TopShape("tiles: 2", {2, 3, 4}), (std::vector<int>{2, 6, 4}));
  EXPECT_EQ(TopShape("axis: 0 tiles: 3", {2, 3, 4}), (std::vector<int>{6, 3, 4}));
  EXPECT_EQ(TopShape("axis: -1 tiles: 3", {2, 3, 4}), (std::vector<int>{2, 3, 12}));
  EXPECT_EQ(TopShape("axis: 2 tiles: 1", {2, 3, 4}), (std::vector<int>{2, 3, 4}));
}

TEST(TileLayerTest, ForwardAndBackwardAlongAxis1) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(TileText("tiles: 3")), &ctx);
  Tensor bottom({2, 2}), top;
  testing::SetData(&bottom, {1.0f, 2.0f, 3.0f, 4.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{2, 6}));
  EXPECT_EQ(Data(top), (std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  testing::SetData(&top, {1, 2, 10, 20, 100, 200, 3, 4, 30, 40, 300, 400});
  std::copy_n(top.cpu_data(), top.count(), top.mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  // Each bottom element gets the sum of its copies' diffs.
  EXPECT_EQ(Diff(bottom), (std::vector<float>{111, 222, 333, 444}));
}

TEST(TileLayerTest, ForwardAndBackwardAlongAxis0) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(TileText("axis: 0 tiles: 2")), &ctx);
  Tensor bottom({2, 2}), top;
  testing::SetData(&bottom, {1.0f, 2.0f, 3.0f, 4.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_EQ(Data(top), (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4}));
  testing::SetData(&top, {1, 2, 3, 4, 10, 20, 30, 40});
  std::copy_n(top.cpu_data(), top.count(), top.mutable_cpu_diff());
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_EQ(Diff(bottom), (std::vector<float>{11, 22, 33, 44}));
}

TEST(TileLayerTest, MiddleAxisMatchesIndexing) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(TileText("axis: 1 tiles: 4")), &ctx);
  Tensor bottom({2, 3, 5}), top;
  testing::FillGaussian(&bottom);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{2, 12, 5}));
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 12; ++c) {
      for (int w = 0; w < 5; ++w) {
        // top[n, c, w] = bottom[n, c % 3, w]: the whole channel block repeats.
        EXPECT_EQ(top.cpu_data()[(n * 12 + c) * 5 + w], bottom.cpu_data()[(n * 3 + c % 3) * 5 + w]);
      }
    }
  }
}

TEST(TileLayerTest, GradientMatchesNumeric) {
  for (const char* fields : {"tiles: 3", "axis: -1 tiles: 2", "axis: 0 tiles: 2"}) {
    SCOPED_TRACE(fields);
    Context ctx(Device::Cpu(), 1701);
    auto layer = CreateLayer(LayerParam(TileText(fields)), &ctx);
    Tensor bottom({2, 3, 2}), top;
    testing::FillGaussian(&bottom);
    testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
  }
}

TEST(TileLayerTest, MissingTilesIsAnError) {
  ExpectTileError("name: 'tile' type: 'Tile'", "tiles is required");
}

TEST(TileLayerTest, NonPositiveTilesIsAnError) {
  ExpectTileError(TileText("tiles: 0"), "must be positive, got 0");
  ExpectTileError(TileText("tiles: -2"), "must be positive, got -2");
}

TEST(TileLayerTest, AxisOutOfRangeIsAnError) {
  ExpectTileError(TileText("axis: 3 tiles: 2"), "2 3 4 (24)");
  ExpectTileError(TileText("axis: -4 tiles: 2"), "axis -4");
}

}  // namespace
}  // namespace cortado
