// SPDX-License-Identifier: Apache-2.0
#include "layers/dummy_data_layer.hpp"

#include <gtest/gtest.h>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> MakeDummy(Context* ctx, const std::string& param) {
  return CreateLayer(
      testing::LayerParam("name: 'dummy' type: 'DummyData' dummy_data_param { " + param + " }"),
      ctx);
}

std::vector<float> Data(const Tensor& t) { return {t.cpu_data(), t.cpu_data() + t.count()}; }

TEST(DummyDataLayerTest, OneShapeForEveryTop) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeDummy(&ctx, "shape { dim: 2 dim: 3 }");
  Tensor a, b;
  layer->Initialize({}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{2, 3}));
  EXPECT_EQ(b.shape(), (std::vector<int>{2, 3}));
}

TEST(DummyDataLayerTest, ShapePerTop) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeDummy(&ctx, "shape { dim: 2 dim: 3 } shape { dim: 5 }");
  Tensor a, b;
  layer->Initialize({}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{2, 3}));
  EXPECT_EQ(b.shape(), (std::vector<int>{5}));
}

TEST(DummyDataLayerTest, LegacyDimensions) {
  Context ctx(Device::Cpu(), 1701);
  // num given per top, the others once.
  auto layer = MakeDummy(&ctx, "num: 2 num: 4 channels: 3 height: 1 width: 5");
  Tensor a, b;
  layer->Initialize({}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{2, 3, 1, 5}));
  EXPECT_EQ(b.shape(), (std::vector<int>{4, 3, 1, 5}));
}

TEST(DummyDataLayerTest, DefaultFillerIsZeroBeforeAnyForward) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeDummy(&ctx, "shape { dim: 2 dim: 2 }");
  Tensor a;
  layer->Initialize({}, {&a});
  EXPECT_EQ(Data(a), (std::vector<float>{0, 0, 0, 0}));
  layer->Forward({}, {&a});
  EXPECT_EQ(Data(a), (std::vector<float>{0, 0, 0, 0}));
}

TEST(DummyDataLayerTest, ConstantTopsAreNotRefilled) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeDummy(&ctx, "shape { dim: 3 } data_filler { type: 'constant' value: 7 }");
  Tensor a;
  layer->Initialize({}, {&a});
  EXPECT_EQ(Data(a), (std::vector<float>{7, 7, 7}));
  // Caffe fills constant tops once, in setup; Forward leaves changes alone.
  a.mutable_cpu_data()[1] = -1.0f;
  layer->Forward({}, {&a});
  EXPECT_EQ(Data(a), (std::vector<float>{7, -1, 7}));
}

TEST(DummyDataLayerTest, RandomTopsAreRefilledEachForward) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeDummy(&ctx, "shape { dim: 50 } data_filler { type: 'uniform' min: 2 max: 3 }");
  Tensor a;
  layer->Initialize({}, {&a});
  layer->Forward({}, {&a});
  const std::vector<float> first = Data(a);
  for (float v : first) {
    EXPECT_GE(v, 2.0f);
    EXPECT_LT(v, 3.0f);
  }
  layer->Forward({}, {&a});
  EXPECT_NE(Data(a), first);
}

TEST(DummyDataLayerTest, FillerPerTop) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeDummy(&ctx,
                         "shape { dim: 4 } data_filler { type: 'constant' value: 1 } "
                         "data_filler { type: 'gaussian' std: 1 }");
  Tensor a, b;
  layer->Initialize({}, {&a, &b});
  layer->Forward({}, {&a, &b});
  EXPECT_EQ(Data(a), (std::vector<float>{1, 1, 1, 1}));
  const std::vector<float> first = Data(b);
  layer->Forward({}, {&a, &b});
  EXPECT_NE(Data(b), first);
  EXPECT_EQ(Data(a), (std::vector<float>{1, 1, 1, 1}));
}

TEST(DummyDataLayerTest, SameSeedSameData) {
  std::vector<float> runs[2];
  for (auto& run : runs) {
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakeDummy(&ctx, "shape { dim: 8 } data_filler { type: 'gaussian' std: 1 }");
    Tensor a;
    layer->Initialize({}, {&a});
    layer->Forward({}, {&a});
    run = Data(a);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(DummyDataLayerTest, BadParamsAreErrors) {
  const char* bad[] = {
      // two fillers for three tops
      "shape { dim: 2 } data_filler { type: 'constant' } data_filler { type: 'constant' }",
      // both shape forms
      "shape { dim: 2 } num: 2 channels: 1 height: 1 width: 1",
      // two shapes for three tops
      "shape { dim: 2 } shape { dim: 3 }",
      // no shape at all
      "",
      // legacy field given twice for three tops
      "num: 1 num: 2 channels: 1 height: 1 width: 1",
      // legacy form missing a field
      "num: 1 channels: 1 height: 1",
  };
  for (const char* param : bad) {
    SCOPED_TRACE(param);
    Context ctx(Device::Cpu(), 1701);
    auto layer = MakeDummy(&ctx, param);
    Tensor a, b, c;
    try {
      layer->Initialize({}, {&a, &b, &c});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("'dummy'"), std::string::npos) << e.what();
    }
  }
}

TEST(DummyDataLayerTest, BottomsAreAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeDummy(&ctx, "shape { dim: 2 }");
  Tensor in({2}), a;
  EXPECT_THROW(layer->Initialize({&in}, {&a}), Error);
}

}  // namespace
}  // namespace cortado
