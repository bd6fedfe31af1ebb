// SPDX-License-Identifier: Apache-2.0
#include "layers/accuracy_layer.hpp"

#include <gtest/gtest.h>

#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

std::unique_ptr<Layer> MakeAccuracy(Context* ctx, const std::string& extra = "") {
  return CreateLayer(
      testing::LayerParam("name: 'acc' type: 'Accuracy' bottom: 'score' bottom: 'label' " + extra),
      ctx);
}

void SetData(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(t->count(), static_cast<int>(values.size()));
  std::copy(values.begin(), values.end(), t->mutable_cpu_data());
}

// Five samples, three classes:
//   0: (0.1, 0.5, 0.4) label 1: best score            -> top-1 hit, top-2 hit
//   1: (0.1, 0.5, 0.4) label 2: second best           -> top-1 miss, top-2 hit
//   2: (0.1, 0.5, 0.4) label 0: worst                 -> misses
//   3: (0.3, 0.3, 0.4) label 0: tied with class 1, so three classes score >= it -> misses
//   4: (0.9, 0.0, 0.1) label -1: ignored with ignore_label -1
// Top-1 accuracy 1/4, top-2 accuracy 2/4. Per class (labels seen: class 0 twice, 1 and 2
// once): top-1 (0, 1, 0), top-2 (0, 1, 1).
struct HandCase {
  Tensor score{std::vector<int>{5, 3}};
  Tensor label{std::vector<int>{5}};
  HandCase() {
    SetData(&score, {0.1f, 0.5f, 0.4f, 0.1f, 0.5f, 0.4f, 0.1f, 0.5f, 0.4f, 0.3f, 0.3f, 0.4f, 0.9f,
                     0.0f, 0.1f});
    SetData(&label, {1, 2, 0, 0, -1});
  }
};

TEST(AccuracyLayerTest, Shapes) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeAccuracy(&ctx);
  Tensor score({4, 10, 2}), label({4, 2}), acc, per_class;
  layer->Initialize({&score, &label}, {&acc, &per_class});
  EXPECT_EQ(acc.num_axes(), 0);
  EXPECT_EQ(acc.count(), 1);
  EXPECT_EQ(per_class.shape(), (std::vector<int>{10}));
  EXPECT_FALSE(layer->AutoTopBlobs());
  EXPECT_EQ(layer->loss(0), 0.0f);  // not a loss
}

TEST(AccuracyLayerTest, TopOneAndTopTwoWithIgnoreLabel) {
  for (int k : {1, 2}) {
    SCOPED_TRACE(k);
    Context ctx(Device::Cpu(), 1701);
    auto layer =
        MakeAccuracy(&ctx, "accuracy_param { ignore_label: -1 top_k: " + std::to_string(k) + " }");
    HandCase c;
    Tensor acc, per_class;
    layer->Initialize({&c.score, &c.label}, {&acc, &per_class});
    EXPECT_EQ(layer->Forward({&c.score, &c.label}, {&acc, &per_class}), 0.0f);
    EXPECT_FLOAT_EQ(acc.cpu_data()[0], k == 1 ? 0.25f : 0.5f);
    EXPECT_FLOAT_EQ(per_class.cpu_data()[0], 0.0f);
    EXPECT_FLOAT_EQ(per_class.cpu_data()[1], 1.0f);
    EXPECT_FLOAT_EQ(per_class.cpu_data()[2], k == 1 ? 0.0f : 1.0f);
  }
}

TEST(AccuracyLayerTest, ClassesWithoutLabelsReadZero) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeAccuracy(&ctx);
  // Both samples are class 0 and right; classes 1 and 2 have no labels.
  Tensor score({2, 3}), label({2}), acc, per_class;
  SetData(&score, {3, 2, 1, 5, 4, 0});
  SetData(&label, {0, 0});
  layer->Initialize({&score, &label}, {&acc, &per_class});
  layer->Forward({&score, &label}, {&acc, &per_class});
  EXPECT_FLOAT_EQ(acc.cpu_data()[0], 1.0f);
  EXPECT_FLOAT_EQ(per_class.cpu_data()[0], 1.0f);
  EXPECT_FLOAT_EQ(per_class.cpu_data()[1], 0.0f);
  EXPECT_FLOAT_EQ(per_class.cpu_data()[2], 0.0f);
}

TEST(AccuracyLayerTest, SpatialLabelsAlongAxis) {
  Context ctx(Device::Cpu(), 1701);
  // Shape 1 x 3 x 2: position 0 scores (1, 3, 2), position 1 scores (4, 0, 5).
  // Labels (1, 0): position 0 right (class 1 best), position 1 wrong (class 2 best) -> 0.5.
  Tensor score({1, 3, 2}), label({1, 2}), acc;
  SetData(&score, {1, 4, 3, 0, 2, 5});
  SetData(&label, {1, 0});
  auto layer = MakeAccuracy(&ctx);
  layer->Initialize({&score, &label}, {&acc});
  layer->Forward({&score, &label}, {&acc});
  EXPECT_FLOAT_EQ(acc.cpu_data()[0], 0.5f);

  // The same scores read with the class axis last (axis: -1) are 3 positions of 2 classes:
  // (1, 4), (3, 0), (2, 5) with labels (1, 0, 0): right, right, wrong -> 2/3.
  Tensor label3({1, 3}), acc3;
  SetData(&label3, {1, 0, 0});
  auto last = MakeAccuracy(&ctx, "accuracy_param { axis: -1 }");
  last->Initialize({&score, &label3}, {&acc3});
  last->Forward({&score, &label3}, {&acc3});
  EXPECT_FLOAT_EQ(acc3.cpu_data()[0], 2.0f / 3.0f);
}

TEST(AccuracyLayerTest, AllIgnoredGivesZero) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeAccuracy(&ctx, "accuracy_param { ignore_label: 7 }");
  Tensor score({2, 3}), label({2}), acc;
  testing::FillGaussian(&score);
  SetData(&label, {7, 7});
  layer->Initialize({&score, &label}, {&acc});
  layer->Forward({&score, &label}, {&acc});
  EXPECT_EQ(acc.cpu_data()[0], 0.0f);
}

TEST(AccuracyLayerTest, BackwardIsUnimplemented) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeAccuracy(&ctx, "accuracy_param { ignore_label: -1 }");
  HandCase c;
  Tensor acc;
  layer->Initialize({&c.score, &c.label}, {&acc});
  layer->Forward({&c.score, &c.label}, {&acc});
  EXPECT_NO_THROW(layer->Backward({&acc}, {false, false}, {&c.score, &c.label}));
  try {
    layer->Backward({&acc}, {true, false}, {&c.score, &c.label});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  }
}

TEST(AccuracyLayerTest, LabelOutOfRangeNamesLayerAndValue) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeAccuracy(&ctx);  // no ignore_label, so -1 is out of range
  HandCase c;
  Tensor acc;
  layer->Initialize({&c.score, &c.label}, {&acc});
  try {
    layer->Forward({&c.score, &c.label}, {&acc});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'acc'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("label value -1"), std::string::npos) << msg;
  }
}

TEST(AccuracyLayerTest, LabelCountMismatchIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeAccuracy(&ctx);
  Tensor score({4, 3}), label({5}), acc;
  try {
    layer->Initialize({&score, &label}, {&acc});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("4 3 (12)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("5 (5)"), std::string::npos) << msg;
  }
}

TEST(AccuracyLayerTest, TopKAboveClassCountIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeAccuracy(&ctx, "accuracy_param { top_k: 4 }");
  Tensor score({2, 3}), label({2}), acc;
  EXPECT_THROW(layer->Initialize({&score, &label}, {&acc}), Error);
}

TEST(AccuracyLayerTest, TopKZeroIsAnError) {
  Context ctx(Device::Cpu(), 1701);
  auto layer = MakeAccuracy(&ctx, "accuracy_param { top_k: 0 }");
  Tensor score({2, 3}), label({2}), acc;
  EXPECT_THROW(layer->Initialize({&score, &label}, {&acc}), Error);
}

}  // namespace
}  // namespace cortado
