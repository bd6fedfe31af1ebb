// SPDX-License-Identifier: Apache-2.0
#include "data/feed_data_layer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/batch_feed.hpp"
#include "io/proto_io.hpp"
#include "net/net.hpp"
#include "support/gradient_checker.hpp"

namespace cortado {
namespace {

// A CoSData layer with tops data [2, 3] and label [2] (CaffeOnSpark's label: 1 axis).
const char* kCosLayer = R"(
  name: "data" type: "CoSData" top: "data" top: "label"
  source_class: "com.yahoo.ml.caffe.DataFrameSource"
  cos_data_param {
    source: "file:///nowhere" batch_size: 2
    top { name: "data" type: FLOAT_ARRAY channels: 3 sample_num_axes: 1 }
    top { name: "label" type: INT channels: 1 sample_num_axes: 0 }
  })";

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.cpu_data(), t.cpu_data() + t.count());
}

// Batch k: data [k, k+.1, k+.2, 10k, .., ..], label [k, -k].
void PushBatch(BatchFeed& feed, int k) {
  const float f = static_cast<float>(k);
  const std::vector<float> data = {f, f + 0.1f, f + 0.2f, 10 * f, 10 * f + 1, 10 * f + 2};
  const std::vector<float> label = {f, -f};
  feed.Push({data.data(), label.data()}, {data.size(), label.size()});
}

struct CosFixture {
  Context ctx{Device::Cpu(), 1701};
  std::unique_ptr<Layer> layer = CreateLayer(testing::LayerParam(kCosLayer), &ctx);
  Tensor data, label;
  CosFixture() { layer->Initialize({}, {&data, &label}); }
  BatchFeed& feed() { return *FeedOf(*layer); }
};

TEST(FeedDataLayerTest, CosDataShapesFollowCaffeOnSpark) {
  CosFixture f;
  EXPECT_STREQ(f.layer->type(), "CoSData");
  EXPECT_EQ(f.data.shape(), (std::vector<int>{2, 3}));
  EXPECT_EQ(f.label.shape(), (std::vector<int>{2}));

  // Defaults (sample_num_axes 3), out_* overriding, transpose.
  Context ctx(Device::Cpu(), 1);
  auto layer = CreateLayer(testing::LayerParam(R"(
    name: "d" type: "CoSData" top: "a" top: "b" top: "c"
    cos_data_param { batch_size: 4
      top { name: "a" type: RAW_IMAGE channels: 1 height: 28 width: 28 }
      top { name: "b" type: RAW_IMAGE channels: 3 height: 8 width: 8 out_height: 5 out_width: 6 }
      top { name: "c" type: FLOAT_ARRAY channels: 7 sample_num_axes: 1 transpose: true } })"),
                           &ctx);
  Tensor a, b, c;
  layer->Initialize({}, {&a, &b, &c});
  EXPECT_EQ(a.shape(), (std::vector<int>{4, 1, 28, 28}));
  EXPECT_EQ(b.shape(), (std::vector<int>{4, 3, 5, 6}));
  EXPECT_EQ(c.shape(), (std::vector<int>{7, 4}));
}

TEST(FeedDataLayerTest, BatchesComeOutInPushOrder) {
  CosFixture f;
  std::thread pusher([&] {
    for (int k = 0; k < 20; ++k) PushBatch(f.feed(), k);
  });
  for (int k = 0; k < 20; ++k) {
    f.layer->Forward({}, {&f.data, &f.label});
    const float x = static_cast<float>(k);
    EXPECT_EQ(Values(f.label), (std::vector<float>{x, -x})) << "batch " << k;
    EXPECT_EQ(Values(f.data)[3], 10 * x);
  }
  pusher.join();
}

TEST(FeedDataLayerTest, TheQueueBoundBlocksThePusher) {
  CosFixture f;
  std::atomic<int> pushed{0};
  // The prefetch thread holds one batch, the feed kFeedCapacity more; the next push blocks.
  const int bound = FeedDataLayer::kFeedCapacity + 1;
  auto pusher = std::async(std::launch::async, [&] {
    for (int k = 0; k < bound + 1; ++k) {
      PushBatch(f.feed(), k);
      ++pushed;
    }
  });
  // Everything up to the bound goes through (the prefetch thread takes batch 0) ...
  while (pushed.load() < bound || f.feed().queued() < FeedDataLayer::kFeedCapacity) {
    std::this_thread::yield();
  }
  // ... and the extra push stays blocked for as long as nothing is consumed.
  EXPECT_EQ(pusher.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  EXPECT_EQ(pushed.load(), bound);
  EXPECT_EQ(f.feed().queued(), FeedDataLayer::kFeedCapacity);
  // One Forward frees a slot and lets it through.
  f.layer->Forward({}, {&f.data, &f.label});
  EXPECT_EQ(f.label.cpu_data()[0], 0.0f);
  pusher.get();
  EXPECT_EQ(pushed.load(), bound + 1);
  for (int k = 1; k <= bound; ++k) {
    f.layer->Forward({}, {&f.data, &f.label});
    EXPECT_EQ(f.label.cpu_data()[0], static_cast<float>(k));
  }
}

TEST(FeedDataLayerTest, CloseDeliversQueuedBatchesThenEndsForward) {
  CosFixture f;
  PushBatch(f.feed(), 0);
  PushBatch(f.feed(), 1);
  f.feed().Close();
  for (int k = 0; k < 2; ++k) {
    f.layer->Forward({}, {&f.data, &f.label});
    EXPECT_EQ(f.label.cpu_data()[0], static_cast<float>(k));
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      f.layer->Forward({}, {&f.data, &f.label});
      FAIL() << "Forward after the end of data";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotFound);
      EXPECT_NE(std::string(e.what()).find("layer 'data' (CoSData): end of data"),
                std::string::npos)
          << e.what();
    }
  }
  try {
    PushBatch(f.feed(), 2);
    FAIL() << "push after close";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted);
  }
}

TEST(FeedDataLayerTest, CloseAndAbortUnblockAWaitingForward) {
  for (bool abort : {false, true}) {
    CosFixture f;
    auto forward = std::async(std::launch::async, [&] {
      f.layer->Forward({}, {&f.data, &f.label});
    });
    // The Forward waits (nothing was pushed) until the feed ends.
    EXPECT_EQ(forward.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
    if (abort) {
      f.feed().Abort("task killed");
    } else {
      f.feed().Close();
    }
    try {
      forward.get();
      FAIL() << "Forward returned without data";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), abort ? ErrorCode::kAborted : ErrorCode::kNotFound) << e.what();
      if (abort) {
        EXPECT_NE(std::string(e.what()).find("task killed"), std::string::npos);
      }
    }
  }
}

TEST(FeedDataLayerTest, AbortUnblocksAPusherAndDestroyingTheLayerToo) {
  CosFixture f;
  std::shared_ptr<BatchFeed> feed = FeedOf(*f.layer);
  auto pusher = std::async(std::launch::async, [&] {
    for (int k = 0;; ++k) PushBatch(*feed, k);  // ends by throwing when the layer goes
  });
  EXPECT_EQ(pusher.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  f.layer.reset();
  try {
    pusher.get();
    FAIL() << "push into a destroyed layer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kAborted);
    EXPECT_NE(std::string(e.what()).find("was destroyed"), std::string::npos) << e.what();
  }
  // The pusher's share of the queue outlives the layer, and stays aborted.
  EXPECT_THROW(PushBatch(*feed, 0), Error);
}

TEST(FeedDataLayerTest, AWrongSizeNamesTheLayerTheTopAndBothShapes) {
  CosFixture f;
  const std::vector<float> data(6), label(3);
  try {
    f.feed().Push({data.data(), label.data()}, {data.size(), label.size()});
    FAIL() << "a label of 3 values was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(),
                 "layer 'data' (CoSData): top 'label' needs a batch of shape 2 (2), got 3 (3)");
  }
  try {
    f.feed().Push({data.data()}, {data.size()});
    FAIL() << "a batch without labels was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 2 tops (data, label), got 1"), std::string::npos)
        << e.what();
  }
  const std::vector<float> odd(5);
  try {
    f.feed().Push({odd.data(), label.data()}, {odd.size(), 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top 'data' needs a batch of shape 2 3 (6), got 5 floats"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(f.feed().queued(), 0);
}

TEST(FeedDataLayerTest, BadParametersAreErrors) {
  Context ctx(Device::Cpu(), 1);
  Tensor a, b;
  auto no_batch =
      CreateLayer(testing::LayerParam("name: 'd' type: 'CoSData' top: 'a' cos_data_param { top { "
                                      "name: 'a' channels: 1 height: 1 width: 1 } }"),
                  &ctx);
  EXPECT_THROW(no_batch->Initialize({}, {&a}), Error);
  auto mismatch = CreateLayer(
      testing::LayerParam("name: 'd' type: 'CoSData' top: 'a' top: 'b' cos_data_param { "
                          "batch_size: 2 top { name: 'a' channels: 1 height: 1 width: 1 "
                          "} }"),
      &ctx);
  EXPECT_THROW(mismatch->Initialize({}, {&a, &b}), Error);
}

TEST(FeedDataLayerTest, MemoryDataWithSourceClassIsAFeed) {
  Context ctx(Device::Cpu(), 1);
  auto fed = CreateLayer(testing::LayerParam(R"(
    name: "mem" type: "MemoryData" top: "data" top: "label"
    source_class: "com.yahoo.ml.caffe.LMDB"
    memory_data_param { batch_size: 2 channels: 1 height: 1 width: 2 })"),
                         &ctx);
  ASSERT_NE(dynamic_cast<FeedDataLayer*>(fed.get()), nullptr);
  EXPECT_STREQ(fed->type(), "MemoryData");
  Tensor data, label;
  fed->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{2, 1, 1, 2}));
  EXPECT_EQ(label.shape(), (std::vector<int>{2}));
  const std::vector<float> d = {1, 2, 3, 4}, l = {5, 6};
  FeedOf(*fed)->Push({d.data(), l.data()}, {4, 2});
  fed->Forward({}, {&data, &label});
  EXPECT_EQ(Values(data), d);
  EXPECT_EQ(Values(label), l);

  // Without source_class it is the plain MemoryData layer.
  auto plain = CreateLayer(
      testing::LayerParam("name: 'm' type: 'MemoryData' top: 'data' top: 'label' "
                          "memory_data_param { batch_size: 2 channels: 1 height: 1 width: 2 }"),
      &ctx);
  EXPECT_EQ(dynamic_cast<FeedDataLayer*>(plain.get()), nullptr);
}

// CaffeOnSpark's data/lenet_cos_train_test.prototxt, as published (CoSData layers).
const char* kLenetCos = R"(
name: "LeNet"
layer {
  name: "data"
  type: "CoSData"
  top: "data"
  top: "label"
  include { phase: TRAIN }
  source_class: "com.yahoo.ml.caffe.DataFrameSource"
  cos_data_param {
    source: "hdfs:///projects/machine_learning/image_dataset/mnist_train_dataframe/"
    batch_size: 64
    top { name: "data" type: RAW_IMAGE channels: 1 height: 28 width: 28
          transform_param { scale: 0.00390625 } }
    top { name: "label" type: STRING channels: 1 height: 1 width: 1 }
  }
}
layer {
  name: "data"
  type: "CoSData"
  top: "data"
  top: "label"
  include { phase: TEST }
  source_class: "com.yahoo.ml.caffe.DataFrameSource"
  cos_data_param {
    source: "hdfs:///projects/machine_learning/image_dataset/mnist_test_dataframe/"
    batch_size: 64
    top { name: "data" type: RAW_IMAGE channels: 1 height: 28 width: 28
          transform_param { scale: 0.00390625 } }
    top { name: "label" type: STRING channels: 1 height: 1 width: 1 }
  }
}
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 20 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 50 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: 500
    weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: 10
    weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
)";

TEST(FeedDataLayerTest, CaffeOnSparkLenetParsesBuildsAndRunsFromTheFeed) {
  caffe::NetParameter param;
  io::ReadProtoFromTextString(kLenetCos, "lenet_cos_train_test.prototxt", &param);
  for (caffe::Phase phase : {caffe::TRAIN, caffe::TEST}) {
    Context ctx(Device::Cpu(), 1701);
    caffe::NetParameter p = param;
    p.mutable_state()->set_phase(phase);
    Net net(p, &ctx);
    EXPECT_EQ(net.blob_by_name("data")->shape(), (std::vector<int>{64, 1, 28, 28}));
    EXPECT_EQ(net.blob_by_name("label")->shape(), (std::vector<int>{64, 1, 1, 1}));
    std::vector<std::string> feeds;
    for (size_t i = 0; i < net.layers().size(); ++i) {
      if (FeedOf(*net.layers()[i])) feeds.push_back(net.layer_names()[i]);
    }
    EXPECT_EQ(feeds, std::vector<std::string>{"data"});
    std::vector<float> images(64 * 28 * 28, 0.5f), labels(64);
    for (int i = 0; i < 64; ++i) labels[static_cast<size_t>(i)] = static_cast<float>(i % 10);
    FeedOf(*net.layer_by_name("data"))
        ->Push({images.data(), labels.data()}, {images.size(), labels.size()});
    const float loss = net.Forward();
    EXPECT_GT(loss, 0.0f);
    EXPECT_EQ(Values(*net.blob_by_name("label")), labels);
  }
}

TEST(FeedDataLayerTest, FeedOfGivesTheFeedOfFeedLayersOnly) {
  Context ctx(Device::Cpu(), 1);
  auto cos = CreateLayer(testing::LayerParam(kCosLayer), &ctx);
  Tensor a, b;
  EXPECT_EQ(FeedOf(*cos), nullptr);  // not set up yet
  cos->Initialize({}, {&a, &b});
  EXPECT_EQ(FeedOf(*cos), static_cast<FeedDataLayer*>(cos.get())->feed());
  auto relu = CreateLayer(testing::LayerParam(R"(name: "r" type: "ReLU")"), &ctx);
  EXPECT_EQ(FeedOf(*relu), nullptr);
}

TEST(FeedDataLayerTest, FeedShapesOfFollowsTheLayersRulesWithoutBuildingIt) {
  const caffe::LayerParameter cos = testing::LayerParam(kCosLayer);
  EXPECT_TRUE(FeedDataLayer::IsFeedLayer(cos));
  EXPECT_EQ(FeedDataLayer::FeedShapesOf(cos, "cos"), (std::vector<std::vector<int>>{{2, 3}, {2}}));
  const caffe::LayerParameter mem = testing::LayerParam(R"(
    name: "mem" type: "MemoryData" top: "data" top: "label" source_class: "x"
    memory_data_param { batch_size: 5 channels: 1 height: 2 width: 3 })");
  EXPECT_TRUE(FeedDataLayer::IsFeedLayer(mem));
  EXPECT_EQ(FeedDataLayer::FeedShapesOf(mem, "mem"),
            (std::vector<std::vector<int>>{{5, 1, 2, 3}, {5}}));
  caffe::LayerParameter plain = mem;
  plain.clear_source_class();
  EXPECT_FALSE(FeedDataLayer::IsFeedLayer(plain));
  caffe::LayerParameter bad = mem;
  bad.mutable_memory_data_param()->set_height(0);
  try {
    FeedDataLayer::FeedShapesOf(bad, "layer 'mem' (MemoryData)");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'mem' (MemoryData): memory_data_param"),
              std::string::npos)
        << e.what();
  }
}

TEST(FeedDataLayerTest, SeekAndSetShardKeepPushedBatches) {
  CosFixture f;
  PushBatch(f.feed(), 0);
  PushBatch(f.feed(), 1);
  f.layer->Seek(7);
  f.layer->SetShard(1, 2);
  for (int k = 0; k < 2; ++k) {
    f.layer->Forward({}, {&f.data, &f.label});
    EXPECT_EQ(f.label.cpu_data()[0], static_cast<float>(k));
  }
}

TEST(FeedDataLayerTest, TransformParamIsAppliedToEachSampleAsItLeavesTheFeed) {
  // A 1 x 4 x 4 image top with mean 1, scale 0.5 and a centred 2 x 2 crop (TEST), and a label
  // top with scale 2: the feeder pushes raw 4 x 4 samples, the top is 2 x 2.
  Context ctx(Device::Cpu(), 1);
  caffe::LayerParameter param = testing::LayerParam(R"(
    name: "img" type: "CoSData" top: "data" top: "label"
    cos_data_param { batch_size: 2
      top { name: "data" type: RAW_IMAGE channels: 1 height: 4 width: 4
            transform_param { mean_value: 1 scale: 0.5 crop_size: 2 } }
      top { name: "label" type: INT channels: 1 sample_num_axes: 0
            transform_param { scale: 2 } } })");
  param.set_phase(caffe::TEST);
  auto layer = CreateLayer(param, &ctx);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  EXPECT_EQ(data.shape(), (std::vector<int>{2, 1, 2, 2}));
  EXPECT_EQ(label.shape(), (std::vector<int>{2}));
  BatchFeed& feed = *FeedOf(*layer);
  EXPECT_EQ(feed.shapes()[0], (std::vector<int>{2, 1, 4, 4}));  // what the feeder pushes

  std::vector<float> pixels(32);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i);
  const std::vector<float> labels = {3, 4};
  feed.Push({pixels.data(), labels.data()}, {pixels.size(), labels.size()});
  layer->Forward({}, {&data, &label});
  // Centre of sample 0: values 5 6 / 9 10; of sample 1: 21 22 / 25 26; (x - 1) * 0.5.
  EXPECT_EQ(Values(data), (std::vector<float>{2, 2.5f, 4, 4.5f, 10, 10.5f, 12, 12.5f}));
  EXPECT_EQ(Values(label), (std::vector<float>{6, 8}));
}

TEST(FeedDataLayerTest, TrainingCropsAndMirrorsAreRandomAndWithinTheSample) {
  // MemoryData (its transform_param applies to the data top): 3 x 3 samples cropped to 2 x 2 at
  // a random offset, mirrored at random. Every output must be one of the 8 crops or mirrors of
  // its sample, and over 50 batches more than one of them must occur.
  Context ctx(Device::Cpu(), 7);
  caffe::LayerParameter param = testing::LayerParam(R"(
    name: "mem" type: "MemoryData" top: "data" top: "label"
    source_class: "com.yahoo.ml.caffe.LMDB"
    memory_data_param { batch_size: 1 channels: 1 height: 3 width: 3 }
    transform_param { crop_size: 2 mirror: true })");
  param.set_phase(caffe::TRAIN);
  auto layer = CreateLayer(param, &ctx);
  Tensor data, label;
  layer->Initialize({}, {&data, &label});
  ASSERT_EQ(data.shape(), (std::vector<int>{1, 1, 2, 2}));
  BatchFeed& feed = *FeedOf(*layer);
  const std::vector<float> sample = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  const float zero = 0;
  std::set<std::vector<float>> possible, seen;
  for (int h = 0; h < 2; ++h) {
    for (int w = 0; w < 2; ++w) {
      const float a = sample[h * 3 + w], b = sample[h * 3 + w + 1];
      const float c = sample[(h + 1) * 3 + w], d = sample[(h + 1) * 3 + w + 1];
      possible.insert({a, b, c, d});
      possible.insert({b, a, d, c});
    }
  }
  std::thread pusher([&] {
    for (int k = 0; k < 50; ++k) feed.Push({sample.data(), &zero}, {sample.size(), 1});
  });
  for (int k = 0; k < 50; ++k) {
    layer->Forward({}, {&data, &label});
    const std::vector<float> out = Values(data);
    EXPECT_EQ(possible.count(out), 1u) << "batch " << k << ": " << fmt::format("{}", out[0]);
    seen.insert(out);
  }
  pusher.join();
  EXPECT_GT(seen.size(), 2u);
}

TEST(FeedDataLayerTest, ATransformThatCannotFitTheSampleNamesTheTop) {
  Context ctx(Device::Cpu(), 1);
  auto layer = CreateLayer(testing::LayerParam(R"(
    name: "img" type: "CoSData" top: "data"
    cos_data_param { batch_size: 2
      top { name: "data" type: RAW_IMAGE channels: 1 height: 4 width: 4
            transform_param { crop_size: 5 } } })"),
                           &ctx);
  Tensor data;
  try {
    layer->Initialize({}, {&data});
    FAIL() << "a crop larger than the sample was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'img' (CoSData): top 'data': crop_size 5 is "
                                         "larger than the datum (1 x 4 x 4)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cortado
