// SPDX-License-Identifier: Apache-2.0
#include "layers/reduction_layer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::LayerParam;

std::string ReductionText(const std::string& fields) {
  return "name: 'red' type: 'Reduction' reduction_param { " + fields + " }";
}

TEST(ReductionLayerTest, Shapes) {
  Context ctx(Device::Cpu(), 1701);
  struct Case {
    std::string fields;
    std::vector<int> top;
  };
  // The default axis 0 reduces everything to a 0-axis scalar.
  const Case cases[] = {
      {"", {}}, {"axis: 1", {2}}, {"axis: 2", {2, 3}}, {"axis: -1", {2, 3}}, {"axis: -3", {}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fields);
    auto layer = CreateLayer(LayerParam(ReductionText(c.fields)), &ctx);
    Tensor bottom({2, 3, 4}), top;
    layer->Initialize({&bottom}, {&top});
    EXPECT_EQ(top.shape(), c.top);
    if (c.top.empty()) {
      EXPECT_EQ(top.count(), 1);
    }
  }
}

struct OpCase {
  const char* op;
  std::vector<float> top;          // for bottom rows {1, -2, 3} and {0, 4, -5}, coeff 2
  std::vector<float> bottom_diff;  // for top diff {1, -0.5}
};

class ReductionOpTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(ReductionOpTest, ForwardAndBackwardByHand) {
  const OpCase& c = GetParam();
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(
      LayerParam(ReductionText(fmt::format("operation: {} axis: 1 coeff: 2", c.op))), &ctx);
  Tensor bottom({2, 3}), top;
  testing::SetData(&bottom, {1.0f, -2.0f, 3.0f, 0.0f, 4.0f, -5.0f});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{2}));
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(top.cpu_data()[i], c.top[i], 1e-5f) << i;
  top.mutable_cpu_diff()[0] = 1.0f;
  top.mutable_cpu_diff()[1] = -0.5f;
  layer->Backward({&top}, {true}, {&bottom});
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(bottom.cpu_diff()[i], c.bottom_diff[i], 1e-6f) << i;
}

TEST_P(ReductionOpTest, GradientMatchesNumeric) {
  for (const char* axis : {"0", "1", "-1"}) {
    SCOPED_TRACE(axis);
    Context ctx(Device::Cpu(), 1701);
    auto layer = CreateLayer(LayerParam(ReductionText(fmt::format(
                                 "operation: {} axis: {} coeff: -1.5", GetParam().op, axis))),
                             &ctx);
    Tensor bottom({2, 3, 4}), top;
    testing::FillAwayFromZero(&bottom, 0.1f, 1.5f);  // ASUM has a kink at 0
    testing::GradientChecker().Check(layer.get(), {&bottom}, {&top});
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, ReductionOpTest,
                         ::testing::Values(
                             // sum: 2 * 2 = 4, 2 * -1 = -2; dx = 2 * dy
                             OpCase{"SUM", {4.0f, -2.0f}, {2, 2, 2, -1, -1, -1}},
                             // |x| sums 6 and 9; dx = 2 * dy * sign(x), sign(0) = 0
                             OpCase{"ASUM", {12.0f, 18.0f}, {2, -2, 2, 0, -1, 1}},
                             // squares sum 14 and 41; dx = 2 * dy * 2x
                             OpCase{"SUMSQ", {28.0f, 82.0f}, {4, -8, 12, 0, -8, 10}},
                             // mean 2/3 and -1/3; dx = 2 * dy / 3
                             OpCase{
                                 "MEAN",
                                 {4.0f / 3.0f, -2.0f / 3.0f},
                                 {2.0f / 3, 2.0f / 3, 2.0f / 3, -1.0f / 3, -1.0f / 3, -1.0f / 3}}),
                         [](const ::testing::TestParamInfo<OpCase>& param_info) {
                           return std::string(param_info.param.op);
                         });

TEST(ReductionLayerTest, DefaultSumsEverythingToAScalar) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam("name: 'red' type: 'Reduction'"), &ctx);
  Tensor bottom({2, 2, 2}), top;
  testing::SetData(&bottom, {1, 2, 3, 4, 5, 6, 7, 8});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  EXPECT_EQ(top.num_axes(), 0);
  EXPECT_FLOAT_EQ(top.cpu_data()[0], 36.0f);
  top.mutable_cpu_diff()[0] = 0.25f;
  layer->Backward({&top}, {true}, {&bottom});
  EXPECT_EQ(Diff(bottom), std::vector<float>(8, 0.25f));
}

TEST(ReductionLayerTest, MeanOverTrailingAxes) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = CreateLayer(LayerParam(ReductionText("operation: MEAN axis: -2")), &ctx);
  Tensor bottom({2, 2, 3}), top;
  testing::SetData(&bottom, {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60});
  layer->Initialize({&bottom}, {&top});
  layer->Forward({&bottom}, {&top});
  ASSERT_EQ(top.shape(), (std::vector<int>{2}));
  EXPECT_FLOAT_EQ(top.cpu_data()[0], 3.5f);
  EXPECT_FLOAT_EQ(top.cpu_data()[1], 35.0f);
}

TEST(ReductionLayerTest, AxisOutOfRangeIsAnError) {
  for (const char* axis : {"3", "-4"}) {
    SCOPED_TRACE(axis);
    Context ctx(Device::Cpu(), 1701);
    auto layer = CreateLayer(LayerParam(ReductionText(std::string("axis: ") + axis)), &ctx);
    Tensor bottom({2, 3, 4}), top;
    try {
      layer->Initialize({&bottom}, {&top});
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("layer 'red' (Reduction)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("2 3 4 (24)"), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace cortado
