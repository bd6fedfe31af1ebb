// SPDX-License-Identifier: Apache-2.0
// What the Spark driver learns of a net without building it: data layers, feed shapes, outputs.
#include "parallel/session_info.hpp"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"

namespace cortado {
namespace {

// CaffeOnSpark's LeNet data layers: a CoSData layer per phase, and a TEST-only accuracy.
const char* kNet = R"(
name: "lenet"
layer { name: "data" type: "CoSData" top: "data" top: "label" include { phase: TRAIN }
  source_class: "com.yahoo.ml.caffe.DataFrameSource"
  cos_data_param { source: "train.parquet" batch_size: 64 dataframe_format: "json"
    top { name: "image" type: RAW_IMAGE channels: 1 height: 28 width: 28
          transform_param { scale: 0.00390625 } }
    top { name: "label" type: INT channels: 1 sample_num_axes: 0 } } }
layer { name: "data" type: "MemoryData" top: "data" top: "label" include { phase: TEST }
  source_class: "com.yahoo.ml.caffe.LMDB"
  memory_data_param { source: "file:/tmp/test_lmdb" batch_size: 100 channels: 1 height: 28
                      width: 28 } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 10 } }
layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }
layer { name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
)";

caffe::NetParameter Net(const std::string& text = kNet) {
  caffe::NetParameter param;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param));
  return param;
}

TEST(SessionInfoTest, AFeedLayersBatchSizeChangesInItsPhaseAlone) {
  const caffe::NetParameter train = WithFeedBatchSize(Net(), caffe::TRAIN, "data", 96, "lenet");
  EXPECT_EQ(DescribeDataLayers(NetForPhase(train, caffe::TRAIN), "lenet")[0].batch_size, 96);
  EXPECT_EQ(DescribeDataLayers(NetForPhase(train, caffe::TEST), "lenet")[0].batch_size, 100);
  const caffe::NetParameter test = WithFeedBatchSize(Net(), caffe::TEST, "data", 7, "lenet");
  EXPECT_EQ(DescribeDataLayers(NetForPhase(test, caffe::TRAIN), "lenet")[0].batch_size, 64);
  EXPECT_EQ(DescribeDataLayers(NetForPhase(test, caffe::TEST), "lenet")[0].batch_size, 7);
  try {
    WithFeedBatchSize(Net(), caffe::TRAIN, "ip", 8, "lenet.prototxt");
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_STREQ(e.what(), "lenet.prototxt: the TRAIN net has no feed layer 'ip'");
  }
  try {
    WithFeedBatchSize(Net(), caffe::TRAIN, "data", 0, "lenet.prototxt");
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(SessionInfoTest, TrainPhaseDescribesTheCoSDataLayerAsFed) {
  const caffe::NetParameter train = NetForPhase(Net(), caffe::TRAIN);
  const std::vector<DataLayerInfo> layers = DescribeDataLayers(train, "lenet.prototxt");
  ASSERT_EQ(layers.size(), 1u);
  const DataLayerInfo& d = layers[0];
  EXPECT_EQ(d.name, "data");
  EXPECT_EQ(d.type, "CoSData");
  EXPECT_TRUE(d.feed);
  EXPECT_EQ(d.source, "train.parquet");
  EXPECT_EQ(d.dataframe_format, "json");
  EXPECT_EQ(d.source_class, "com.yahoo.ml.caffe.DataFrameSource");
  EXPECT_EQ(d.tops, (std::vector<std::string>{"data", "label"}));
  EXPECT_EQ(d.columns, (std::vector<std::string>{"image", "label"}));
  EXPECT_EQ(d.top_types, (std::vector<std::string>{"RAW_IMAGE", "INT"}));
  EXPECT_EQ(d.transposed, (std::vector<bool>{false, false}));
  // As pushed: before transform_param; the label has no sample axes.
  EXPECT_EQ(d.sample_shapes, (std::vector<std::vector<int>>{{1, 28, 28}, {}}));
  EXPECT_EQ(d.batch_size, 64);
}

TEST(SessionInfoTest, TestPhaseDescribesTheMemoryDataLayer) {
  const std::vector<DataLayerInfo> layers =
      DescribeDataLayers(NetForPhase(Net(), caffe::TEST), "lenet.prototxt");
  ASSERT_EQ(layers.size(), 1u);
  EXPECT_EQ(layers[0].type, "MemoryData");
  EXPECT_TRUE(layers[0].feed);
  EXPECT_EQ(layers[0].source, "file:/tmp/test_lmdb");
  EXPECT_EQ(layers[0].dataframe_format, "");
  EXPECT_EQ(layers[0].sample_shapes, (std::vector<std::vector<int>>{{1, 28, 28}, {}}));
  EXPECT_EQ(layers[0].batch_size, 100);
}

TEST(SessionInfoTest, OtherDataLayersAreListedButNotFed) {
  const caffe::NetParameter net = Net(R"(
    layer { name: "db" type: "Data" top: "x" top: "y" data_param { source: "/data/lmdb" } }
    layer { name: "mem" type: "MemoryData" top: "a" top: "b"
            memory_data_param { batch_size: 1 channels: 1 height: 1 width: 1 } })");
  const auto layers = DescribeDataLayers(NetForPhase(net, caffe::TRAIN), "n");
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_FALSE(layers[0].feed);
  EXPECT_EQ(layers[0].source, "/data/lmdb");
  EXPECT_TRUE(layers[0].sample_shapes.empty());
  EXPECT_FALSE(layers[1].feed);  // MemoryData without source_class
}

TEST(SessionInfoTest, ABadFeedLayerIsNamedWithItsNet) {
  const caffe::NetParameter net = Net(R"(
    layer { name: "d" type: "CoSData" top: "x" cos_data_param { batch_size: 0 } })");
  try {
    DescribeDataLayers(NetForPhase(net, caffe::TRAIN), "bad.prototxt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.prototxt: layer 'd' (CoSData)"), std::string::npos)
        << e.what();
  }
}

TEST(SessionInfoTest, OutputsAreTheBlobsNoLaterLayerReads) {
  EXPECT_EQ(OutputBlobNames(NetForPhase(Net(), caffe::TEST)),
            (std::vector<std::string>{"accuracy", "loss"}));
  EXPECT_EQ(OutputBlobNames(NetForPhase(Net(), caffe::TRAIN)), (std::vector<std::string>{"loss"}));
  EXPECT_EQ(BlobNames(NetForPhase(Net(), caffe::TEST)),
            (std::vector<std::string>{"data", "label", "ip", "accuracy", "loss"}));
}

}  // namespace
}  // namespace cortado
