// SPDX-License-Identifier: Apache-2.0
#include "layers/input_layer.hpp"

#include <gtest/gtest.h>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

TEST(InputLayerTest, ShapesEachTop) {
  Context ctx;
  auto param = testing::LayerParam(
      "name: 'in' type: 'Input' top: 'a' top: 'b' "
      "input_param { shape { dim: 2 dim: 3 } shape { dim: 4 } }");
  auto layer = CreateLayer(param, &ctx);
  Tensor a, b;
  layer->Initialize({}, {&a, &b});
  EXPECT_EQ(a.shape(), (std::vector<int>{2, 3}));
  EXPECT_EQ(b.shape(), (std::vector<int>{4}));
}

TEST(InputLayerTest, OneShapeForAllTops) {
  Context ctx;
  auto layer = CreateLayer(testing::LayerParam("name: 'in' type: 'Input' top: 'a' top: 'b' "
                                               "input_param { shape { dim: 5 } }"),
                           &ctx);
  Tensor a, b;
  layer->Initialize({}, {&a, &b});
  EXPECT_EQ(b.shape(), (std::vector<int>{5}));
}

TEST(InputLayerTest, WrongNumberOfShapesIsAnError) {
  Context ctx;
  auto layer =
      CreateLayer(testing::LayerParam("name: 'in' type: 'Input' top: 'a' top: 'b' top: 'c' "
                                      "input_param { shape { dim: 5 } shape { dim: 6 } }"),
                  &ctx);
  Tensor a, b, c;
  EXPECT_THROW(layer->Initialize({}, {&a, &b, &c}), Error);
}

TEST(LayerRegistryTest, UnknownTypeNamesLayerAndKnownTypes) {
  Context ctx;
  try {
    CreateLayer(testing::LayerParam("name: 'mystery' type: 'Frobnicate'"), &ctx);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mystery"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Frobnicate"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Input"), std::string::npos) << msg;
  }
}

TEST(LayerRegistryTest, PythonLayerIsRefusedNamingItsModule) {
  Context ctx;
  try {
    CreateLayer(
        testing::LayerParam("name: 'loss' type: 'Python' "
                            "python_param { module: 'pyloss' layer: 'EuclideanLossLayer' }"),
        &ctx);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'loss'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no Python layers"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pyloss"), std::string::npos) << msg;
    EXPECT_NE(msg.find("EuclideanLossLayer"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace cortado
