// SPDX-License-Identifier: Apache-2.0
#include "net/net.hpp"

#include <gtest/gtest.h>

#include "io/proto_io.hpp"
#include "net/insert_splits.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

using testing::NetParam;

TEST(NetFilterTest, PhaseLevelAndStageRules) {
  auto param = NetParam(R"(
    state { phase: TRAIN level: 2 stage: "a" }
    layer { name: "train_only" type: "Input" include { phase: TRAIN } }
    layer { name: "test_only" type: "Input" include { phase: TEST } }
    layer { name: "level_low" type: "Input" include { max_level: 1 } }
    layer { name: "level_ok" type: "Input" include { min_level: 2 } }
    layer { name: "stage_a" type: "Input" include { stage: "a" } }
    layer { name: "stage_b" type: "Input" include { stage: "b" } }
    layer { name: "not_a" type: "Input" include { not_stage: "a" } }
    layer { name: "excluded" type: "Input" exclude { phase: TRAIN } }
    layer { name: "any_of" type: "Input" include { phase: TEST } include { stage: "a" } }
  )");
  caffe::NetParameter filtered = Net::FilterNet(param);
  std::vector<std::string> names;
  for (const auto& l : filtered.layer()) names.push_back(l.name());
  EXPECT_EQ(names, (std::vector<std::string>{"train_only", "level_ok", "stage_a", "any_of"}));
}

TEST(InsertSplitsTest, SplitsBlobWithTwoConsumers) {
  auto param = NetParam(R"(
    layer { name: "data" type: "Input" top: "x" }
    layer { name: "a" type: "ReLU" bottom: "x" top: "ya" }
    layer { name: "b" type: "ReLU" bottom: "x" top: "yb" }
  )");
  caffe::NetParameter out = InsertSplits(param);
  ASSERT_EQ(out.layer_size(), 4);
  EXPECT_EQ(out.layer(1).type(), "Split");
  EXPECT_EQ(out.layer(1).name(), "x_data_0_split");
  EXPECT_EQ(out.layer(1).top_size(), 2);
  EXPECT_EQ(out.layer(2).bottom(0), "x_data_0_split_0");
  EXPECT_EQ(out.layer(3).bottom(0), "x_data_0_split_1");
}

TEST(InsertSplitsTest, LossWeightCountsAsConsumer) {
  auto param = NetParam(R"(
    layer { name: "data" type: "Input" top: "x" loss_weight: 2 }
    layer { name: "a" type: "ReLU" bottom: "x" top: "y" }
  )");
  caffe::NetParameter out = InsertSplits(param);
  ASSERT_EQ(out.layer_size(), 3);
  EXPECT_EQ(out.layer(0).loss_weight(0), 0.0f);
  EXPECT_EQ(out.layer(1).loss_weight(0), 2.0f);
  EXPECT_EQ(out.layer(1).loss_weight(1), 0.0f);
  EXPECT_EQ(out.layer(2).bottom(0), "x_data_0_split_1");
}

TEST(InsertSplitsTest, UnknownBottomNamesLayerAndBlob) {
  auto param = NetParam(R"(
    layer { name: "data" type: "Input" top: "x" }
    layer { name: "relu" type: "ReLU" bottom: "nothing" top: "y" }
  )");
  try {
    InsertSplits(param);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'relu'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'nothing'"), std::string::npos) << msg;
  }
}

TEST(NetTest, InputOnlyNetExposesBlobs) {
  Context ctx;
  auto param = NetParam(R"(
    name: "tiny"
    layer { name: "data" type: "Input" top: "x" top: "y"
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
  )");
  Net net(param, &ctx);
  EXPECT_EQ(net.name(), "tiny");
  EXPECT_EQ(net.blob_by_name("x")->count(), 6);
  EXPECT_EQ(net.input_blobs().size(), 2u);
  EXPECT_EQ(net.output_blobs().size(), 2u);
  EXPECT_THROW(net.blob_by_name("z"), Error);
  EXPECT_FLOAT_EQ(net.Forward(), 0.0f);
}

}  // namespace
}  // namespace cortado
