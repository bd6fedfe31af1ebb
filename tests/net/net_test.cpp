// SPDX-License-Identifier: Apache-2.0
#include "net/net.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "io/proto_io.hpp"
#include "math/math.hpp"
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

// A layer whose bottoms changed shape since it was last shaped is reshaped by Forward, as
// Caffe reshapes every layer at every Forward: here the input, then a Filter's output.
TEST(NetTest, ForwardReshapesLayersWhoseBottomsChanged) {
  Context ctx;
  auto param = NetParam(R"(
    layer { name: "in" type: "Input" top: "x" top: "keep"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
    layer { name: "filter" type: "Filter" bottom: "x" bottom: "keep" top: "kept" }
    layer { name: "ip" type: "InnerProduct" bottom: "kept" top: "out"
            inner_product_param { num_output: 2 weight_filler { type: "constant" value: 1 } } }
  )");
  Net net(param, &ctx);
  Tensor* x = net.blob_by_name("x");
  Tensor* keep = net.blob_by_name("keep");
  for (int i = 0; i < x->count(); ++i) x->mutable_cpu_data()[i] = static_cast<float>(i);
  const float keep_two[] = {0, 1, 0, 1};
  std::copy_n(keep_two, 4, keep->mutable_cpu_data());
  net.Forward();
  const Tensor* out = net.blob_by_name("out");
  ASSERT_EQ(out->shape(), (std::vector<int>{2, 2}));
  // Rows 1 and 3 summed by the all-ones weights: 3+4+5 and 9+10+11.
  EXPECT_FLOAT_EQ(out->cpu_data()[0], 12.0f);
  EXPECT_FLOAT_EQ(out->cpu_data()[2], 30.0f);

  // Three rows in, one kept, no Net::Reshape() call in between.
  x->Reshape({3, 3});
  keep->Reshape({3});
  for (int i = 0; i < x->count(); ++i) x->mutable_cpu_data()[i] = 1.0f;
  const float keep_one[] = {0, 0, 1};
  std::copy_n(keep_one, 3, keep->mutable_cpu_data());
  net.Forward();
  ASSERT_EQ(out->shape(), (std::vector<int>{1, 2}));
  EXPECT_FLOAT_EQ(out->cpu_data()[0], 3.0f);
}

// Input -> ip1 (frozen) -> ReLU -> ip2 -> loss: only ip2 and the loss run backward.
const char kFrozenFirstLayer[] = R"(
  name: "frozen"
  layer { name: "in" type: "Input" top: "x" top: "target"
          input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }
  layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h"
          param { lr_mult: 0 } param { lr_mult: 0 }
          inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.5 } } }
  layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
  layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "out"
          inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "out" bottom: "target" top: "loss" }
)";

void FillInputs(Net* net) {
  Rng rng(12);
  for (const char* name : {"x", "target"}) {
    Tensor* t = net->blob_by_name(name);
    math::RngGaussian(t->count(), 0.0f, 1.0f, rng, t->mutable_cpu_data());
  }
}

// The layers that run backward, highest index first.
std::vector<int> BackwardOrder(const Net& net) {
  std::vector<int> order;
  for (int i = static_cast<int>(net.layers().size()) - 1; i >= 0; --i) {
    if (net.layer_need_backward()[i]) order.push_back(i);
  }
  return order;
}

TEST(NetTest, AfterBackwardHooksSeeTheLayersThatRunBackwardInReverse) {
  Context ctx(Device::Cpu(), 3);
  Net net(NetParam(kFrozenFirstLayer), &ctx);
  std::vector<int> first, second;
  net.AddAfterBackward([&](int layer_id) { first.push_back(layer_id); });
  net.AddAfterBackward([&](int layer_id) {
    // Hooks run in the order they were added.
    EXPECT_EQ(first.size(), second.size() + 1);
    second.push_back(layer_id);
  });
  FillInputs(&net);
  net.ForwardBackward();
  const std::vector<int> expected{4, 3};  // loss, ip2 (ReLU and ip1 need no backward)
  EXPECT_EQ(BackwardOrder(net), expected);
  EXPECT_EQ(first, expected);
  EXPECT_EQ(second, expected);
  // A partial pass reports its own layers.
  first.clear();
  second.clear();
  net.BackwardFromTo(3, 0);
  EXPECT_EQ(first, std::vector<int>{3});
}

// Input -> Convolution -> BatchNorm -> Scale -> ReLU (in place, fused into the BatchNorm) ->
// InnerProduct -> loss.
const char kFusedChain[] = R"(
  name: "chain" force_backward: true
  state { phase: TRAIN }
  layer { name: "in" type: "Input" top: "x" top: "target"
          input_param { shape { dim: 2 dim: 2 dim: 4 dim: 4 } shape { dim: 2 dim: 2 } } }
  layer { name: "conv" type: "Convolution" bottom: "x" top: "c"
          convolution_param { num_output: 3 kernel_size: 3 pad: 1
                              weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "gaussian" std: 0.5 } } }
  layer { name: "bn" type: "BatchNorm" bottom: "c" top: "c" }
  layer { name: "scale" type: "Scale" bottom: "c" top: "c" scale_param { bias_term: true } }
  layer { name: "relu" type: "ReLU" bottom: "c" top: "c" }
  layer { name: "ip" type: "InnerProduct" bottom: "c" top: "out"
          inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.3 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "out" bottom: "target" top: "loss" }
)";

TEST(NetTest, AfterBackwardHooksComeWhenTheLayersGradientsAreFinal) {
  for (const bool fuse : {false, true}) {
    SCOPED_TRACE(fuse ? "fused" : "separate layers");
    Context ctx(Device::Cpu(), 3);
    NetOptions options;
    options.fuse = fuse;
    Net net(NetParam(kFusedChain), &ctx, options);
    ASSERT_EQ(net.layer_by_name("scale")->fused_into() != nullptr, fuse);
    // What each layer's parameters hold when its hook runs.
    std::vector<std::vector<std::vector<float>>> seen(net.layers().size());
    std::vector<int> order;
    net.AddAfterBackward([&](int layer_id) {
      order.push_back(layer_id);
      for (const auto& blob : net.layers()[layer_id]->blobs()) {
        seen[layer_id].emplace_back(blob->cpu_diff(), blob->cpu_diff() + blob->count());
      }
    });
    FillInputs(&net);
    net.ForwardBackward();
    EXPECT_EQ(order, BackwardOrder(net));
    ASSERT_GE(order.size(), 6u);  // loss, ip, relu, scale, bn, conv (and the input layer)
    for (int layer_id : order) {
      const auto& blobs = net.layers()[layer_id]->blobs();
      ASSERT_EQ(seen[layer_id].size(), blobs.size());
      for (size_t j = 0; j < blobs.size(); ++j) {
        const std::vector<float> final_diff(blobs[j]->cpu_diff(),
                                            blobs[j]->cpu_diff() + blobs[j]->count());
        EXPECT_EQ(seen[layer_id][j], final_diff) << net.layer_names()[layer_id] << " blob " << j;
      }
    }
    // The Scale's gradient is not zero: its hook did not come before the BatchNorm computed it.
    const Tensor& gamma = *net.layer_by_name("scale")->blobs()[0];
    EXPECT_GT(math::Asum(gamma.count(), gamma.cpu_diff()), 0.0f);
  }
}

TEST(NetTest, AnAfterBackwardHookThatThrowsStopsTheBackwardPass) {
  Context ctx(Device::Cpu(), 3);
  Net net(NetParam(kFrozenFirstLayer), &ctx);
  std::vector<int> seen;
  net.AddAfterBackward([&](int layer_id) {
    seen.push_back(layer_id);
    CORTADO_THROW(kAborted, "stop at layer {}", layer_id);
  });
  FillInputs(&net);
  net.Forward();
  EXPECT_THROW(net.Backward(), Error);
  EXPECT_EQ(seen, std::vector<int>{4});
  EXPECT_THROW(net.AddAfterBackward(nullptr), Error);
}

}  // namespace
}  // namespace cortado
