// SPDX-License-Identifier: Apache-2.0
#include "layers/eltwise_layer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(static_cast<int>(values.size()), t->count());
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

std::vector<float> Data(const Tensor& t) {
  return std::vector<float>(t.cpu_data(), t.cpu_data() + t.count());
}

std::vector<float> Diff(const Tensor& t) {
  return std::vector<float>(t.cpu_diff(), t.cpu_diff() + t.count());
}

// Three 4-element bottoms used by the forward tests.
class EltwiseLayerForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetData(&a_, {1, -2, 3, 4});
    SetData(&b_, {2, 5, -1, 0.5f});
    SetData(&c_, {0, 1, 2, 3});
  }
  std::vector<float> Run(const std::string& eltwise_param) {
    layer_ = CreateLayer(
        testing::LayerParam("name: 'elt' type: 'Eltwise' eltwise_param { " + eltwise_param + " }"),
        &ctx_);
    layer_->Initialize({&a_, &b_, &c_}, {&top_});
    layer_->Forward({&a_, &b_, &c_}, {&top_});
    return Data(top_);
  }
  Context ctx_{Device::Cpu(), 1701};
  Tensor a_{{4}}, b_{{4}}, c_{{4}}, top_;
  std::unique_ptr<Layer> layer_;
};

TEST_F(EltwiseLayerForwardTest, Shape) {
  Run("operation: SUM");
  EXPECT_EQ(top_.shape(), (std::vector<int>{4}));
}

TEST_F(EltwiseLayerForwardTest, Prod) {
  // 1*2*0, -2*5*1, 3*-1*2, 4*0.5*3
  EXPECT_EQ(Run("operation: PROD"), (std::vector<float>{0, -10, -6, 6}));
}

TEST_F(EltwiseLayerForwardTest, SumWithCoefficients) {
  // a - b + 2c: 1-2+0, -2-5+2, 3+1+4, 4-0.5+6
  EXPECT_EQ(Run("operation: SUM coeff: 1 coeff: -1 coeff: 2"),
            (std::vector<float>{-1, -5, 8, 9.5f}));
  EXPECT_EQ(Run("operation: SUM"), (std::vector<float>{3, 4, 4, 7.5f}));
}

TEST_F(EltwiseLayerForwardTest, MaxAndItsBackward) {
  // Winners: b (2), b (5), a (3), a (4).
  EXPECT_EQ(Run("operation: MAX"), (std::vector<float>{2, 5, 3, 4}));
  SetData(&top_, {2, 5, 3, 4});
  std::vector<float> top_diff = {10, 20, 30, 40};
  std::copy(top_diff.begin(), top_diff.end(), top_.mutable_cpu_diff());
  layer_->Backward({&top_}, {true, true, true}, {&a_, &b_, &c_});
  EXPECT_EQ(Diff(a_), (std::vector<float>{0, 0, 30, 40}));
  EXPECT_EQ(Diff(b_), (std::vector<float>{10, 20, 0, 0}));
  EXPECT_EQ(Diff(c_), (std::vector<float>{0, 0, 0, 0}));
}

TEST_F(EltwiseLayerForwardTest, MaxTiesGoToBottomOneThenToTheEarlierBottom) {
  SetData(&a_, {1, 1, 1, 1});
  SetData(&b_, {1, 1, 1, 1});
  SetData(&c_, {1, 1, 1, 1});
  Run("operation: MAX");
  std::fill(top_.mutable_cpu_diff(), top_.mutable_cpu_diff() + 4, 1.0f);
  layer_->Backward({&top_}, {true, true, true}, {&a_, &b_, &c_});
  EXPECT_EQ(Diff(a_), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(Diff(b_), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(Diff(c_), (std::vector<float>{0, 0, 0, 0}));
}

TEST_F(EltwiseLayerForwardTest, ProdBackwardHandlesZeroWithStableGradient) {
  // d(abc)/dc at element 0 is a*b = 2 even though c = 0 there.
  Run("operation: PROD");
  std::fill(top_.mutable_cpu_diff(), top_.mutable_cpu_diff() + 4, 1.0f);
  layer_->Backward({&top_}, {true, true, true}, {&a_, &b_, &c_});
  EXPECT_EQ(Diff(c_), (std::vector<float>{2, -10, -3, 2}));
  EXPECT_EQ(Diff(a_), (std::vector<float>{0, 5, -2, 1.5f}));
}

void CheckGradient(const std::string& eltwise_param, float step = 1e-2f) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3, 2, 2}), b({2, 3, 2, 2}), c({2, 3, 2, 2}), top;
  testing::FillUniform(&a, 0.5f, 1.5f, 1);
  testing::FillUniform(&b, -1.5f, 1.5f, 2);
  testing::FillUniform(&c, -1.5f, -0.5f, 3);
  // Keep a and b well apart so that MAX has no near-ties within the step.
  for (int i = 0; i < a.count(); ++i) {
    float& x = b.mutable_cpu_data()[i];
    if (std::fabs(x - a.cpu_data()[i]) < 0.1f) x += 0.2f;
  }
  auto layer = CreateLayer(
      testing::LayerParam("name: 'elt' type: 'Eltwise' eltwise_param { " + eltwise_param + " }"),
      &ctx);
  testing::GradientCheckOptions options;
  options.step = step;
  testing::GradientChecker(options).Check(layer.get(), {&a, &b, &c}, {&top});
}

TEST(EltwiseLayerTest, GradientProdStable) { CheckGradient("operation: PROD"); }

TEST(EltwiseLayerTest, GradientProdUnstable) {
  CheckGradient("operation: PROD stable_prod_grad: false");
}

TEST(EltwiseLayerTest, GradientSum) { CheckGradient("operation: SUM"); }

TEST(EltwiseLayerTest, GradientSumWithCoefficients) {
  CheckGradient("operation: SUM coeff: 1 coeff: -0.5 coeff: 2");
}

TEST(EltwiseLayerTest, GradientMax) {
  // c never wins; a and b are kept at least 0.1 apart, far more than the step.
  CheckGradient("operation: MAX", 1e-3f);
}

TEST(EltwiseLayerTest, DifferentShapesNameLayerAndBothShapes) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2, 3}), b({3, 2}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'elt' type: 'Eltwise'"), &ctx);
  try {
    layer->Initialize({&a, &b}, {&top});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'elt'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 3 (6)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3 2 (6)"), std::string::npos) << msg;
  }
}

TEST(EltwiseLayerTest, CoefficientsWithProdIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2}), b({2}), top;
  auto layer = CreateLayer(
      testing::LayerParam(
          "name: 'elt' type: 'Eltwise' eltwise_param { operation: PROD coeff: 1 coeff: 2 }"),
      &ctx);
  EXPECT_THROW(layer->Initialize({&a, &b}, {&top}), Error);
}

TEST(EltwiseLayerTest, WrongNumberOfCoefficientsIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2}), b({2}), top;
  auto layer = CreateLayer(
      testing::LayerParam("name: 'elt' type: 'Eltwise' eltwise_param { coeff: 1 }"), &ctx);
  EXPECT_THROW(layer->Initialize({&a, &b}, {&top}), Error);
}

TEST(EltwiseLayerTest, InPlaceIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2}), b({2});
  auto layer = CreateLayer(
      testing::LayerParam("name: 'elt' type: 'Eltwise' bottom: 'a' bottom: 'b' top: 'b'"), &ctx);
  try {
    layer->Initialize({&a, &b}, {&b});
    FAIL() << "in place accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'elt' (Eltwise): cannot run in place: top 'b' is "
                                         "also bottom 1"),
              std::string::npos)
        << e.what();
  }
}

TEST(EltwiseLayerTest, OneBottomIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  Tensor a({2}), top;
  auto layer = CreateLayer(testing::LayerParam("name: 'elt' type: 'Eltwise'"), &ctx);
  EXPECT_THROW(layer->Initialize({&a}, {&top}), Error);
}

}  // namespace
}  // namespace cortado
