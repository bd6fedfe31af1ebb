// SPDX-License-Identifier: Apache-2.0
#include "layers/filter_layer.hpp"

#include <gtest/gtest.h>

#include <string>

#include "layers/in_place_check.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::Data;
using testing::Diff;
using testing::SetData;

std::unique_ptr<Layer> MakeLayer(Context* ctx, int filtered = 2) {
  std::string text = "name: 'filter' type: 'Filter' ";
  for (int i = 0; i < filtered; ++i) {
    text += "bottom: 'in" + std::to_string(i) + "' top: 'out" + std::to_string(i) + "' ";
  }
  return CreateLayer(testing::LayerParam(text + "bottom: 'selector'"), ctx);
}

// Four items: data 4 x 2 and labels 4 x 3 x 1; the selector keeps items 1 and 3.
struct Case {
  Tensor data{std::vector<int>{4, 2}};
  Tensor labels{std::vector<int>{4, 3, 1}};
  Tensor selector{std::vector<int>{4, 1}};
  Tensor top0, top1;
  Case() {
    SetData(&data, {1, 2, 3, 4, 5, 6, 7, 8});
    SetData(&labels, {10, 11, 12, 20, 21, 22, 30, 31, 32, 40, 41, 42});
    SetData(&selector, {0, 1, 0, 2.5f});  // any nonzero value selects
  }
  std::vector<Tensor*> bottom() { return {&data, &labels, &selector}; }
  std::vector<Tensor*> top() { return {&top0, &top1}; }
};

TEST(FilterLayerTest, FirstReshapeKeepsEveryRow) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Case c;
  layer->Initialize(c.bottom(), c.top());
  // As Caffe: the selector is not read while the layer is set up.
  EXPECT_EQ(c.top0.shape(), (std::vector<int>{4, 2}));
  EXPECT_EQ(c.top1.shape(), (std::vector<int>{4, 3, 1}));
  // Later reshapes count the selected rows.
  layer->Reshape(c.bottom(), c.top());
  EXPECT_EQ(c.top0.shape(), (std::vector<int>{2, 2}));
  EXPECT_EQ(c.top1.shape(), (std::vector<int>{2, 3, 1}));
  EXPECT_TRUE(layer->AllowForceBackward(0));
  EXPECT_TRUE(layer->AllowForceBackward(1));
  EXPECT_FALSE(layer->AllowForceBackward(2));
}

TEST(FilterLayerTest, ForwardAndBackwardByHand) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Case c;
  layer->Initialize(c.bottom(), c.top());
  layer->Forward(c.bottom(), c.top());  // reshapes the tops itself, as Caffe's Forward
  EXPECT_EQ(c.top0.shape(), (std::vector<int>{2, 2}));
  EXPECT_EQ(Data(c.top0), (std::vector<float>{3, 4, 7, 8}));
  EXPECT_EQ(Data(c.top1), (std::vector<float>{20, 21, 22, 40, 41, 42}));
  SetData(&c.top0, {0, 0, 0, 0});
  std::vector<float> d0 = {-1, -2, -3, -4}, d1 = {1, 2, 3, 4, 5, 6};
  std::copy(d0.begin(), d0.end(), c.top0.mutable_cpu_diff());
  std::copy(d1.begin(), d1.end(), c.top1.mutable_cpu_diff());
  std::fill_n(c.data.mutable_cpu_diff(), 8, 9.0f);
  std::fill_n(c.labels.mutable_cpu_diff(), 12, 9.0f);
  layer->Backward(c.top(), {true, true, false}, c.bottom());
  EXPECT_EQ(Diff(c.data), (std::vector<float>{0, 0, -1, -2, 0, 0, -3, -4}));
  EXPECT_EQ(Diff(c.labels), (std::vector<float>{0, 0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6}));
}

TEST(FilterLayerTest, SelectionFollowsTheSelectorEachForward) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx, 1);
  Case c;
  layer->Initialize({&c.data, &c.selector}, {&c.top0});
  layer->Forward({&c.data, &c.selector}, {&c.top0});
  EXPECT_EQ(Data(c.top0), (std::vector<float>{3, 4, 7, 8}));
  SetData(&c.selector, {1, 1, -1, 0});
  layer->Forward({&c.data, &c.selector}, {&c.top0});
  EXPECT_EQ(Data(c.top0), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(FilterLayerTest, NothingSelectedGivesEmptyTopsAndZeroGradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Case c;
  SetData(&c.selector, {0, 0, 0, 0});
  layer->Initialize(c.bottom(), c.top());
  layer->Forward(c.bottom(), c.top());
  EXPECT_EQ(c.top0.shape(), (std::vector<int>{0, 2}));
  EXPECT_EQ(c.top1.shape(), (std::vector<int>{0, 3, 1}));
  std::fill_n(c.data.mutable_cpu_diff(), 8, 9.0f);
  layer->Backward(c.top(), {true, false, false}, c.bottom());
  EXPECT_EQ(c.data.asum_diff(), 0.0f);
}

TEST(FilterLayerTest, Gradient) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeLayer(&ctx);
  Case c;
  testing::FillGaussian(&c.data, 0.0f, 1.0f, 4);
  testing::FillGaussian(&c.labels, 0.0f, 1.0f, 5);
  testing::GradientCheckOptions options;
  options.check_bottoms = {0, 1};
  testing::GradientChecker(options).Check(layer.get(), c.bottom(), c.top());
}

void ExpectError(const std::function<void()>& run, const std::string& needle) {
  try {
    run();
    FAIL() << "no error; wanted " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("layer 'filter' (Filter)"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(FilterLayerTest, Errors) {
  Context ctx(Device::Cpu(), 1701);
  Case c;
  ExpectError(
      [&] {
        Tensor wide({4, 2});
        MakeLayer(&ctx, 1)->Initialize({&c.data, &wide}, {&c.top0});
      },
      "selector");
  ExpectError(
      [&] {
        Tensor five({5});
        MakeLayer(&ctx, 1)->Initialize({&c.data, &five}, {&c.top0});
      },
      "first dimension 5");
  ExpectError([&] { MakeLayer(&ctx, 2)->Initialize(c.bottom(), {&c.top0}); }, "one top per");
  auto layer = MakeLayer(&ctx);
  layer->Initialize(c.bottom(), c.top());
  layer->Forward(c.bottom(), c.top());
  ExpectError([&] { layer->Backward(c.top(), {true, false, true}, c.bottom()); }, "selector");
}

}  // namespace
}  // namespace cortado
