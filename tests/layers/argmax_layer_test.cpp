// SPDX-License-Identifier: Apache-2.0
#include "layers/argmax_layer.hpp"

#include <gtest/gtest.h>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> MakeArgMax(Context* ctx, const std::string& extra = "") {
  return CreateLayer(testing::LayerParam("name: 'am' type: 'ArgMax' " + extra), ctx);
}

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(t->count(), static_cast<int>(values.size()));
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

std::vector<float> Data(const Tensor& t) { return {t.cpu_data(), t.cpu_data() + t.count()}; }

std::vector<int> TopShape(const std::string& extra, const std::vector<int>& bottom_shape) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeArgMax(&ctx, extra);
  Tensor bottom(bottom_shape), top;
  layer->Initialize({&bottom}, {&top});
  return top.shape();
}

TEST(ArgMaxLayerTest, ShapesWithoutAxis) {
  // N x 1 x top_k, or N x 2 x top_k with out_max_val, padded with 1s to the bottom's axes.
  EXPECT_EQ(TopShape("", {2, 4}), (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(TopShape("argmax_param { top_k: 2 }", {2, 4}), (std::vector<int>{2, 1, 2}));
  EXPECT_EQ(TopShape("argmax_param { out_max_val: true top_k: 3 }", {2, 4}),
            (std::vector<int>{2, 2, 3}));
  EXPECT_EQ(TopShape("", {2, 3, 4, 5}), (std::vector<int>{2, 1, 1, 1}));
  EXPECT_EQ(TopShape("argmax_param { out_max_val: true top_k: 2 }", {2, 3, 4, 5}),
            (std::vector<int>{2, 2, 2, 1}));
}

TEST(ArgMaxLayerTest, ShapesWithAxis) {
  // The bottom's shape with shape(axis) = top_k, with or without out_max_val.
  EXPECT_EQ(TopShape("argmax_param { axis: 1 }", {2, 3, 4}), (std::vector<int>{2, 1, 4}));
  EXPECT_EQ(TopShape("argmax_param { axis: -1 top_k: 2 }", {2, 3, 4}), (std::vector<int>{2, 3, 2}));
  EXPECT_EQ(TopShape("argmax_param { axis: 0 out_max_val: true }", {2, 3, 4}),
            (std::vector<int>{1, 3, 4}));
}

// Two samples of four values: (1, 5, 3, 5) and (0, -1, 2, 1). Sorted by value, ties to the
// larger index: sample 0 -> indices 3, 1, 2, 0; sample 1 -> indices 2, 3, 0, 1.
TEST(ArgMaxLayerTest, ForwardWithoutAxis) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom({2, 4});
  SetData(&bottom, {1, 5, 3, 5, 0, -1, 2, 1});
  {
    auto layer = MakeArgMax(&ctx);
    Tensor top;
    layer->Initialize({&bottom}, {&top});
    layer->Forward({&bottom}, {&top});
    EXPECT_EQ(Data(top), (std::vector<float>{3, 2}));
  }
  {
    auto layer = MakeArgMax(&ctx, "argmax_param { top_k: 2 }");
    Tensor top;
    layer->Initialize({&bottom}, {&top});
    layer->Forward({&bottom}, {&top});
    EXPECT_EQ(Data(top), (std::vector<float>{3, 1, 2, 3}));
  }
  {
    // Per sample: the top_k indices, then their values.
    auto layer = MakeArgMax(&ctx, "argmax_param { top_k: 2 out_max_val: true }");
    Tensor top;
    layer->Initialize({&bottom}, {&top});
    layer->Forward({&bottom}, {&top});
    EXPECT_EQ(Data(top), (std::vector<float>{3, 1, 5, 5, 2, 3, 2, 1}));
  }
}

// Shape 2 x 3 x 2 (n, c, k). Along axis 1, for each (n, k):
//   n = 0: k = 0 values (1, 7, 4) -> index 1 (value 7), k = 1 values (9, 2, 3) -> 0 (9)
//   n = 1: k = 0 values (0, 0, 6) -> index 2 (6),       k = 1 values (5, 8, 1) -> 1 (8)
TEST(ArgMaxLayerTest, ForwardAlongAxis) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom({2, 3, 2});
  SetData(&bottom, {1, 9, 7, 2, 4, 3, /* n = 1 */ 0, 5, 0, 8, 6, 1});
  {
    auto layer = MakeArgMax(&ctx, "argmax_param { axis: 1 }");
    Tensor top;
    layer->Initialize({&bottom}, {&top});
    layer->Forward({&bottom}, {&top});
    EXPECT_EQ(top.shape(), (std::vector<int>{2, 1, 2}));
    EXPECT_EQ(Data(top), (std::vector<float>{1, 0, 2, 1}));
  }
  {
    auto layer = MakeArgMax(&ctx, "argmax_param { axis: 1 out_max_val: true }");
    Tensor top;
    layer->Initialize({&bottom}, {&top});
    layer->Forward({&bottom}, {&top});
    EXPECT_EQ(Data(top), (std::vector<float>{7, 9, 6, 8}));
  }
  {
    // top_k 2: the best two indices for each (n, k), laid out n x rank x k.
    // n = 0: k = 0 -> (1, 2), k = 1 -> (0, 2); n = 1: k = 0 -> (2, 1) (the tie between
    // classes 0 and 1 goes to index 1), k = 1 -> (1, 0).
    auto layer = MakeArgMax(&ctx, "argmax_param { axis: 1 top_k: 2 }");
    Tensor top;
    layer->Initialize({&bottom}, {&top});
    layer->Forward({&bottom}, {&top});
    EXPECT_EQ(Data(top), (std::vector<float>{1, 0, 2, 2, 2, 1, 1, 0}));
  }
}

TEST(ArgMaxLayerTest, TopKTooLargeIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor bottom({2, 3, 2}), top;
  auto flat = MakeArgMax(&ctx, "argmax_param { top_k: 7 }");  // 6 values per sample
  try {
    flat->Initialize({&bottom}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'am'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 2 (12)"), std::string::npos) << msg;
  }
  auto along = MakeArgMax(&ctx, "argmax_param { axis: 1 top_k: 4 }");
  EXPECT_THROW(along->Initialize({&bottom}, {&top}), Error);
  auto zero = MakeArgMax(&ctx, "argmax_param { top_k: 0 }");
  EXPECT_THROW(zero->Initialize({&bottom}, {&top}), Error);
  auto bad_axis = MakeArgMax(&ctx, "argmax_param { axis: 3 }");
  EXPECT_THROW(bad_axis->Initialize({&bottom}, {&top}), Error);
}

TEST(ArgMaxLayerTest, BackwardIsUnimplemented) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeArgMax(&ctx);
  Tensor bottom({2, 3}), top;
  testing::FillGaussian(&bottom);
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_NO_THROW(layer->Backward({&top}, {false}, {&bottom}));
  try {
    layer->Backward({&top}, {true}, {&bottom});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  }
}

}  // namespace
}  // namespace cortado
