// SPDX-License-Identifier: Apache-2.0
#include "io/upgrade.hpp"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/context.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "io/proto_io.hpp"
#include "layers/layer.hpp"
#include "net/net.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::io {
namespace {

// A file under the temp directory, removed when the test ends.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_((std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid())))
                  .string()) {}
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }
  void Write(const std::string& text) const { std::ofstream(path_) << text; }

 private:
  std::string path_;
};

// Captures what the process logger writes while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)) {
    old_level_ = Logger()->level();
    Logger()->set_level(spdlog::level::info);
    Logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = Logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    Logger()->set_level(old_level_);
  }
  // The captured lines that contain `needle`.
  int CountLines(const std::string& needle) const {
    std::istringstream lines(stream_.str());
    int count = 0;
    for (std::string line; std::getline(lines, line);) count += line.find(needle) != line.npos;
    return count;
  }
  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum old_level_;
};

using testing::NetParam;

void ExpectSameNet(const caffe::NetParameter& actual, const caffe::NetParameter& expected) {
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(actual, expected)) << diff << "\nactual:\n"
                                                     << actual.DebugString();
}

// Runs `body`, which must throw Error(code) whose message contains every one of `needles`.
template <typename Body>
void ExpectError(ErrorCode code, const std::vector<std::string>& needles, Body body) {
  try {
    body();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << needle << "' missing from: " << e.what();
    }
  }
}

// Caffe's examples/mnist/lenet_train_test.prototxt as it was written for Caffe 1.0-rc1 (V1
// layers, transformation fields in data_param), plus param names and a share mode on ip2.
constexpr const char* kLeNetV1 = R"(
name: "LeNet"
layers {
  name: "mnist"
  type: DATA
  top: "data"
  top: "label"
  data_param {
    source: "examples/mnist/mnist_train_lmdb"
    backend: LMDB
    batch_size: 64
    scale: 0.00390625
  }
  include: { phase: TRAIN }
}
layers {
  name: "mnist"
  type: DATA
  top: "data"
  top: "label"
  data_param {
    source: "examples/mnist/mnist_test_lmdb"
    backend: LMDB
    batch_size: 100
    scale: 0.00390625
    mirror: false
  }
  include: { phase: TEST }
}
layers {
  name: "conv1"
  type: CONVOLUTION
  bottom: "data"
  top: "conv1"
  blobs_lr: 1
  blobs_lr: 2
  convolution_param {
    num_output: 20
    kernel_size: 5
    stride: 1
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layers {
  name: "pool1"
  type: POOLING
  bottom: "conv1"
  top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layers {
  name: "conv2"
  type: CONVOLUTION
  bottom: "pool1"
  top: "conv2"
  blobs_lr: 1
  blobs_lr: 2
  convolution_param {
    num_output: 50
    kernel_size: 5
    stride: 1
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layers {
  name: "pool2"
  type: POOLING
  bottom: "conv2"
  top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layers {
  name: "ip1"
  type: INNER_PRODUCT
  bottom: "pool2"
  top: "ip1"
  blobs_lr: 1
  blobs_lr: 2
  weight_decay: 1
  weight_decay: 0
  inner_product_param {
    num_output: 500
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layers {
  name: "relu1"
  type: RELU
  bottom: "ip1"
  top: "ip1"
}
layers {
  name: "ip2"
  type: INNER_PRODUCT
  bottom: "ip1"
  top: "ip2"
  param: "ip2_w"
  param: "ip2_b"
  blob_share_mode: PERMISSIVE
  blobs_lr: 1
  blobs_lr: 2
  inner_product_param {
    num_output: 10
    weight_filler { type: "xavier" }
    bias_filler { type: "constant" }
  }
}
layers {
  name: "accuracy"
  type: ACCURACY
  bottom: "ip2"
  bottom: "label"
  top: "accuracy"
  include: { phase: TEST }
}
layers {
  name: "loss"
  type: SOFTMAX_LOSS
  bottom: "ip2"
  bottom: "label"
  top: "loss"
  loss_weight: 1
}
)";

// The same net in the current format, written by hand from Caffe's upgraded LeNet.
constexpr const char* kLeNetCurrent = R"(
name: "LeNet"
layer {
  name: "mnist" type: "Data" top: "data" top: "label"
  include { phase: TRAIN }
  transform_param { scale: 0.00390625 }
  data_param { source: "examples/mnist/mnist_train_lmdb" backend: LMDB batch_size: 64 }
}
layer {
  name: "mnist" type: "Data" top: "data" top: "label"
  include { phase: TEST }
  transform_param { scale: 0.00390625 mirror: false }
  data_param { source: "examples/mnist/mnist_test_lmdb" backend: LMDB batch_size: 100 }
}
layer {
  name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param {
    num_output: 20 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" }
  }
}
layer {
  name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layer {
  name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param {
    num_output: 50 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" }
  }
}
layer {
  name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layer {
  name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
  inner_product_param {
    num_output: 500 weight_filler { type: "xavier" } bias_filler { type: "constant" }
  }
}
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer {
  name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  param { name: "ip2_w" share_mode: PERMISSIVE lr_mult: 1 }
  param { name: "ip2_b" lr_mult: 2 }
  inner_product_param {
    num_output: 10 weight_filler { type: "xavier" } bias_filler { type: "constant" }
  }
}
layer {
  name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST }
}
layer {
  name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss"
  loss_weight: 1
}
)";

TEST(UpgradeTest, V1LeNetPrototxtBecomesCurrentFormat) {
  TempFile file("lenet_v1.prototxt");
  file.Write(kLeNetV1);
  LogCapture log;
  caffe::NetParameter net = ReadNetParameterFromTextFile(file.path());

  EXPECT_EQ(net.layers_size(), 0);
  ASSERT_EQ(net.layer_size(), 11);
  ExpectSameNet(net, NetParam(kLeNetCurrent));
  // The points the full comparison covers, spelled out.
  EXPECT_EQ(net.layer(2).type(), "Convolution");
  EXPECT_EQ(net.layer(2).param(0).lr_mult(), 1.0f);
  EXPECT_EQ(net.layer(2).param(1).lr_mult(), 2.0f);
  EXPECT_FALSE(net.layer(2).param(1).has_decay_mult());  // Caffe's default 1 applies.
  EXPECT_EQ(net.layer(6).param(1).decay_mult(), 0.0f);
  EXPECT_EQ(net.layer(10).type(), "SoftmaxWithLoss");
  EXPECT_FALSE(net.layer(0).data_param().has_scale());
  EXPECT_FLOAT_EQ(net.layer(0).transform_param().scale(), 0.00390625f);

  // One INFO line for each of the two upgrades, each naming the file.
  EXPECT_EQ(log.CountLines(file.path()), 2) << log.text();
  EXPECT_EQ(log.CountLines("V1 layer definition"), 1) << log.text();
  EXPECT_EQ(log.CountLines("transform_param"), 1) << log.text();
  EXPECT_FALSE(NetNeedsUpgrade(net));
  EXPECT_FALSE(UpgradeNetAsNeeded("again", &net));
}

TEST(UpgradeTest, V1TypeTableCoversEveryEnumValue) {
  const auto* values = caffe::V1LayerParameter::LayerType_descriptor();
  std::set<std::string> names;
  for (int i = 0; i < values->value_count(); ++i) {
    const auto type = static_cast<caffe::V1LayerParameter::LayerType>(values->value(i)->number());
    const std::string name = V1LayerTypeName(type);
    if (type == caffe::V1LayerParameter::NONE) {
      EXPECT_EQ(name, "");
    } else {
      EXPECT_FALSE(name.empty()) << values->value(i)->name();
      EXPECT_TRUE(names.insert(name).second) << name << " appears twice";
    }
  }
  // Caffe's spellings that are not a plain CamelCase of the enum name.
  EXPECT_EQ(V1LayerTypeName(caffe::V1LayerParameter::SOFTMAX_LOSS), "SoftmaxWithLoss");
  EXPECT_EQ(V1LayerTypeName(caffe::V1LayerParameter::TANH), "TanH");
  EXPECT_EQ(V1LayerTypeName(caffe::V1LayerParameter::IM2COL), "Im2col");
  EXPECT_EQ(V1LayerTypeName(caffe::V1LayerParameter::BNLL), "BNLL");
  EXPECT_EQ(V1LayerTypeName(caffe::V1LayerParameter::HDF5_DATA), "HDF5Data");
  EXPECT_EQ(V1LayerTypeName(caffe::V1LayerParameter::ABSVAL), "AbsVal");
  EXPECT_EQ(V1LayerTypeName(static_cast<caffe::V1LayerParameter::LayerType>(999)), "");
}

TEST(UpgradeTest, V1LayerKeepsEveryTypeParamAndRule) {
  // Set every *_param message of a V1 layer (empty is enough to be present) and check that
  // each arrives in the upgraded layer, with the rules, loss weights and blobs.
  caffe::NetParameter net;
  caffe::V1LayerParameter* v1 = net.add_layers();
  v1->set_name("all");
  v1->set_type(caffe::V1LayerParameter::POWER);
  v1->add_include()->set_phase(caffe::TRAIN);
  v1->add_exclude()->set_min_level(3);
  v1->add_loss_weight(0.5f);
  v1->add_blobs()->add_data(1.5f);
  v1->add_blob_share_mode(caffe::V1LayerParameter::STRICT);
  const auto* reflection = v1->GetReflection();
  const auto* descriptor = caffe::V1LayerParameter::descriptor();
  std::vector<std::string> param_fields;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* field = descriptor->field(i);
    const std::string& name = field->name();
    if (name.size() > 6 && name.substr(name.size() - 6) == "_param") {
      reflection->MutableMessage(v1, field);
      param_fields.push_back(name);
    }
  }
  ASSERT_EQ(param_fields.size(), 30u);  // Every *_param V1LayerParameter declares.
  EXPECT_TRUE(UpgradeNetAsNeeded("<all-params>", &net));
  ASSERT_EQ(net.layer_size(), 1);
  const caffe::LayerParameter& layer = net.layer(0);
  EXPECT_EQ(layer.type(), "Power");
  for (const auto& name : param_fields) {
    const auto* field = caffe::LayerParameter::descriptor()->FindFieldByName(name);
    ASSERT_NE(field, nullptr) << name;
    EXPECT_TRUE(layer.GetReflection()->HasField(layer, field)) << name;
  }
  EXPECT_EQ(layer.include(0).phase(), caffe::TRAIN);
  EXPECT_EQ(layer.exclude(0).min_level(), 3);
  EXPECT_EQ(layer.loss_weight(0), 0.5f);
  EXPECT_EQ(layer.blobs(0).data(0), 1.5f);
  ASSERT_EQ(layer.param_size(), 1);
  EXPECT_EQ(layer.param(0).share_mode(), caffe::ParamSpec::STRICT);
  EXPECT_TRUE(layer.param(0).has_share_mode());
}

TEST(UpgradeTest, V1BinaryCaffemodelLoadsWithWeights) {
  // What an old .caffemodel holds: V1 layers with legacy 4-D blobs, blobs_lr/weight_decay,
  // and the net input names without shapes.
  caffe::NetParameter old;
  old.set_name("old");
  old.add_input("data");
  caffe::V1LayerParameter* ip = old.add_layers();
  ip->set_name("ip");
  ip->set_type(caffe::V1LayerParameter::INNER_PRODUCT);
  ip->add_bottom("data");
  ip->add_top("ip");
  ip->add_blobs_lr(1);
  ip->add_blobs_lr(2);
  ip->add_weight_decay(1);
  ip->add_weight_decay(0);
  ip->mutable_inner_product_param()->set_num_output(2);
  caffe::BlobProto* weights = ip->add_blobs();
  weights->set_num(1);
  weights->set_channels(1);
  weights->set_height(2);
  weights->set_width(3);
  for (float w : {0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f}) weights->add_data(w);
  caffe::BlobProto* bias = ip->add_blobs();
  bias->set_num(1);
  bias->set_channels(1);
  bias->set_height(1);
  bias->set_width(2);
  bias->add_data(0.25f);
  bias->add_data(-0.5f);
  TempFile file("old_v1.caffemodel");
  WriteProtoToBinaryFile(old, file.path());

  caffe::NetParameter net = ReadNetParameterFromBinaryFile(file.path());
  EXPECT_EQ(net.layers_size(), 0);
  EXPECT_EQ(net.input_size(), 0);  // Names alone are dropped, no Input layer is made.
  ASSERT_EQ(net.layer_size(), 1);
  const caffe::LayerParameter& layer = net.layer(0);
  EXPECT_EQ(layer.name(), "ip");
  EXPECT_EQ(layer.type(), "InnerProduct");
  EXPECT_EQ(layer.inner_product_param().num_output(), 2u);
  ASSERT_EQ(layer.param_size(), 2);
  EXPECT_EQ(layer.param(0).lr_mult(), 1.0f);
  EXPECT_EQ(layer.param(0).decay_mult(), 1.0f);
  EXPECT_EQ(layer.param(1).lr_mult(), 2.0f);
  EXPECT_EQ(layer.param(1).decay_mult(), 0.0f);
  ASSERT_EQ(layer.blobs_size(), 2);
  EXPECT_EQ(layer.blobs(0).SerializeAsString(), weights->SerializeAsString());
  EXPECT_EQ(layer.blobs(1).SerializeAsString(), bias->SerializeAsString());

  if (!LayerRegistry::Get().Has("InnerProduct")) {
    GTEST_SKIP() << "InnerProduct is not built yet; the weight-loading half runs once it is";
  }
  Context ctx(Device::Cpu(), 1701);
  Net target(NetParam(R"(
    layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
            inner_product_param { num_output: 2 } }
  )"),
             &ctx);
  target.CopyTrainedLayersFrom(file.path());
  float* x = target.blob_by_name("data")->mutable_cpu_data();
  x[0] = 1.0f;
  x[1] = 2.0f;
  x[2] = 3.0f;
  target.Forward();
  // W = [[0.5 1 1.5] [2 2.5 3]], b = [0.25 -0.5]:
  // 0.5*1 + 1*2 + 1.5*3 + 0.25 = 7.25 and 2*1 + 2.5*2 + 3*3 - 0.5 = 15.5.
  const float* y = target.blob_by_name("ip")->cpu_data();
  EXPECT_FLOAT_EQ(y[0], 7.25f);
  EXPECT_FLOAT_EQ(y[1], 15.5f);
}

TEST(UpgradeTest, V1LayerWithoutKnownTypeIsAParseError) {
  TempFile file("none_type.prototxt");
  file.Write("layers { name: 'odd' type: NONE bottom: 'x' top: 'y' }");
  ExpectError(ErrorCode::kParse, {file.path(), "'odd'", "type"},
              [&] { ReadNetParameterFromTextFile(file.path()); });

  // A type number this build does not define (a fork's layer) in a binary file: NetParameter
  // field 2 (layers) holding name "x" (field 4) and type 99 (field 5).
  TempFile model("unknown_type.caffemodel");
  WriteFileAtomic(model.path(), std::string("\x12\x05\x22\x01x\x28\x63", 7));
  ExpectError(ErrorCode::kParse, {model.path(), "'x'", "99"},
              [&] { ReadNetParameterFromBinaryFile(model.path()); });
}

TEST(UpgradeTest, MixedLayerAndLayersIsAParseError) {
  caffe::NetParameter net = NetParam(R"(
    layer { name: "new" type: "ReLU" bottom: "x" top: "x" }
    layers { name: "old" type: RELU bottom: "x" top: "x" }
  )");
  ExpectError(ErrorCode::kParse, {"mixed.prototxt", "`layers`", "`layer`"},
              [&] { UpgradeNetAsNeeded("mixed.prototxt", &net); });
}

// A V0 net in the style of Caffe's first ImageNet definitions: a padding layer before conv,
// flat parameters on every layer, and the net-level input fields.
constexpr const char* kV0Net = R"(
name: "V0Net"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layers {
  layer { name: "source" type: "data" source: "train_db" batchsize: 32 scale: 0.5
          meanfile: "mean.binaryproto" cropsize: 6 mirror: true rand_skip: 10 }
  top: "images" top: "label"
}
layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
layers {
  layer { name: "conv1" type: "conv" num_output: 4 kernelsize: 5 stride: 1 group: 1
          biasterm: true weight_filler { type: "gaussian" std: 0.01 }
          bias_filler { type: "constant" value: 0 }
          blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0 }
  bottom: "pad1" top: "conv1"
}
layers { layer { name: "relu1" type: "relu" } bottom: "conv1" top: "conv1" }
layers { layer { name: "pad2" type: "padding" pad: 1 } bottom: "conv1" top: "pad2" }
layers {
  layer { name: "pool1" type: "pool" pool: AVE kernelsize: 3 stride: 2 }
  bottom: "pad2" top: "pool1"
}
layers {
  layer { name: "norm1" type: "lrn" local_size: 5 alpha: 0.0001 beta: 0.75 }
  bottom: "pool1" top: "norm1"
}
layers { layer { name: "fc" type: "innerproduct" num_output: 10 } bottom: "norm1" top: "fc" }
layers { layer { name: "drop" type: "dropout" dropout_ratio: 0.4 } bottom: "fc" top: "fc" }
layers { layer { name: "prob" type: "softmax" } bottom: "fc" top: "prob" }
layers { layer { name: "loss" type: "softmax_loss" } bottom: "fc" bottom: "label" top: "loss" }
)";

constexpr const char* kV0NetCurrent = R"(
name: "V0Net"
layer {
  name: "input" type: "Input" top: "data"
  input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } }
}
layer {
  name: "source" type: "Data" top: "images" top: "label"
  transform_param { scale: 0.5 mirror: true crop_size: 6 mean_file: "mean.binaryproto" }
  data_param { source: "train_db" batch_size: 32 rand_skip: 10 }
}
layer {
  name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
  convolution_param {
    num_output: 4 bias_term: true pad: 2 kernel_size: 5 stride: 1 group: 1
    weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 0 }
  }
}
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer {
  name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: AVE pad: 1 kernel_size: 3 stride: 2 }
}
layer {
  name: "norm1" type: "LRN" bottom: "pool1" top: "norm1"
  lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 }
}
layer {
  name: "fc" type: "InnerProduct" bottom: "norm1" top: "fc"
  inner_product_param { num_output: 10 }
}
layer {
  name: "drop" type: "Dropout" bottom: "fc" top: "fc"
  dropout_param { dropout_ratio: 0.4 }
}
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
)";

TEST(UpgradeTest, V0NetFoldsPaddingAndMovesParameters) {
  TempFile file("v0.prototxt");
  file.Write(kV0Net);
  LogCapture log;
  caffe::NetParameter net = ReadNetParameterFromTextFile(file.path());
  ExpectSameNet(net, NetParam(kV0NetCurrent));
  // V0 -> V1, V1 -> current and the input fields: one line each, naming the file.
  EXPECT_EQ(log.CountLines(file.path()), 3) << log.text();
  EXPECT_EQ(log.CountLines("folded 2 padding layer(s)"), 1) << log.text();
}

TEST(UpgradeTest, V0FieldOnWrongTypeIsIgnoredWithWarning) {
  caffe::NetParameter net = NetParam(R"(
    layers { layer { name: "r" type: "relu" num_output: 3 kernelsize: 2 } bottom: "x" top: "x" }
    input: "x"
  )");
  LogCapture log;
  UpgradeNetAsNeeded("wrong_field.prototxt", &net);
  ASSERT_EQ(net.layer_size(), 1);
  EXPECT_EQ(net.layer(0).type(), "ReLU");
  EXPECT_FALSE(net.layer(0).has_convolution_param());
  EXPECT_EQ(log.CountLines("num_output, kernelsize"), 1) << log.text();
}

TEST(UpgradeTest, V0ErrorsNameFileAndLayer) {
  caffe::NetParameter unknown = NetParam(R"(
    input: "x"
    layers { layer { name: "fancy1" type: "fancy" } bottom: "x" top: "y" }
  )");
  ExpectError(ErrorCode::kParse, {"v0.prototxt", "'fancy1'", "'fancy'"},
              [&] { UpgradeNetAsNeeded("v0.prototxt", &unknown); });

  caffe::NetParameter pad_into_relu = NetParam(R"(
    input: "x"
    layers { layer { name: "pad" type: "padding" pad: 1 } bottom: "x" top: "p" }
    layers { layer { name: "act" type: "relu" } bottom: "p" top: "y" }
  )");
  ExpectError(ErrorCode::kParse, {"v0.prototxt", "'pad'", "'act'", "relu"},
              [&] { UpgradeNetAsNeeded("v0.prototxt", &pad_into_relu); });

  caffe::NetParameter dangling = NetParam(R"(
    layers { layer { name: "c" type: "conv" num_output: 1 kernelsize: 1 } bottom: "nowhere"
             top: "y" }
  )");
  ExpectError(ErrorCode::kParse, {"v0.prototxt", "'c'", "'nowhere'"},
              [&] { UpgradeNetAsNeeded("v0.prototxt", &dangling); });
}

TEST(UpgradeTest, InputFieldsBecomeAnInputLayerInFront) {
  TempFile file("inputs.prototxt");
  file.Write(R"(
    name: "deploy"
    input: "data"
    input_dim: 2 input_dim: 3 input_dim: 4 input_dim: 5
    input: "label"
    input_dim: 2 input_dim: 1 input_dim: 1 input_dim: 1
    layer { name: "extra" type: "Input" top: "z" input_param { shape { dim: 7 } } }
  )");
  caffe::NetParameter param = ReadNetParameterFromTextFile(file.path());
  EXPECT_EQ(param.input_size(), 0);
  EXPECT_EQ(param.input_dim_size(), 0);
  ASSERT_EQ(param.layer_size(), 2);
  EXPECT_EQ(param.layer(0).name(), "input");
  EXPECT_EQ(param.layer(0).type(), "Input");
  EXPECT_EQ(param.layer(1).name(), "extra");

  // The net builds from the file, with the blob names and shapes of the old fields.
  Context ctx(Device::Cpu(), 1701);
  Net net(file.path(), caffe::TEST, &ctx);
  EXPECT_EQ(net.layer_names(), (std::vector<std::string>{"input", "extra"}));
  EXPECT_EQ(net.blob_by_name("data")->shape(), (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(net.blob_by_name("label")->shape(), (std::vector<int>{2, 1, 1, 1}));
  EXPECT_EQ(net.blob_by_name("z")->shape(), (std::vector<int>{7}));
  EXPECT_EQ(net.input_blobs().size(), 3u);
}

TEST(UpgradeTest, InputShapeFieldsBecomeAnInputLayer) {
  caffe::NetParameter param = NetParam(R"(
    input: "a" input_shape { dim: 2 dim: 7 }
    input: "b" input_shape { dim: 3 }
  )");
  EXPECT_TRUE(NetNeedsUpgrade(param));
  EXPECT_TRUE(UpgradeNetAsNeeded("shapes.prototxt", &param));
  ExpectSameNet(param, NetParam(R"(
    layer { name: "input" type: "Input" top: "a" top: "b"
            input_param { shape { dim: 2 dim: 7 } shape { dim: 3 } } }
  )"));
  Context ctx(Device::Cpu(), 1701);
  Net net(param, &ctx);
  EXPECT_EQ(net.blob_by_name("a")->shape(), (std::vector<int>{2, 7}));
  EXPECT_EQ(net.blob_by_name("b")->shape(), (std::vector<int>{3}));
}

TEST(UpgradeTest, InputCountMismatchIsAParseError) {
  caffe::NetParameter dims = NetParam("input: 'data' input_dim: 1 input_dim: 3 input_dim: 8");
  ExpectError(ErrorCode::kParse, {"bad_inputs.prototxt", "'data'", "input_dim"},
              [&] { UpgradeNetAsNeeded("bad_inputs.prototxt", &dims); });
  caffe::NetParameter shapes = NetParam("input: 'a' input: 'b' input_shape { dim: 1 }");
  ExpectError(ErrorCode::kParse, {"bad_inputs.prototxt", "'a', 'b'", "input_shape"},
              [&] { UpgradeNetAsNeeded("bad_inputs.prototxt", &shapes); });
  caffe::NetParameter nameless = NetParam("input_dim: 1 input_dim: 1 input_dim: 1 input_dim: 1");
  ExpectError(ErrorCode::kParse, {"bad_inputs.prototxt", "input"},
              [&] { UpgradeNetAsNeeded("bad_inputs.prototxt", &nameless); });
}

TEST(UpgradeTest, BatchNormParamSpecsArePinned) {
  caffe::NetParameter param = NetParam(R"(
    layer { name: "bn" type: "BatchNorm" bottom: "x" top: "x"
            param { lr_mult: 0 } param { lr_mult: 0 } param { lr_mult: 0 } }
    layer { name: "bn_shared" type: "BatchNorm" bottom: "y" top: "y"
            param { name: "m" lr_mult: 0 } param { name: "v" lr_mult: 0 }
            param { name: "f" lr_mult: 0 } }
    layer { name: "bn_new" type: "BatchNorm" bottom: "z" top: "z" }
  )");
  EXPECT_TRUE(NetNeedsUpgrade(param));
  LogCapture log;
  EXPECT_TRUE(UpgradeNetAsNeeded("bn.prototxt", &param));
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(param.layer(i).param_size(), 3);
    for (const auto& spec : param.layer(i).param()) {
      EXPECT_EQ(spec.lr_mult(), 0.0f);
      EXPECT_EQ(spec.decay_mult(), 0.0f);
    }
  }
  EXPECT_EQ(param.layer(1).param(0).name(), "m");
  EXPECT_EQ(param.layer(1).param(2).name(), "f");
  EXPECT_EQ(param.layer(2).param_size(), 0);
  EXPECT_EQ(log.CountLines("bn.prototxt"), 1) << log.text();
  EXPECT_EQ(log.CountLines("'bn', layer 'bn_shared'"), 1) << log.text();
  // Once pinned, nothing more to do.
  EXPECT_FALSE(NetNeedsUpgrade(param));
}

TEST(UpgradeTest, SolverTypeEnumBecomesTypeString) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"SGD", "SGD"},         {"NESTEROV", "Nesterov"}, {"ADAGRAD", "AdaGrad"},
      {"RMSPROP", "RMSProp"}, {"ADADELTA", "AdaDelta"}, {"ADAM", "Adam"}};
  TempFile file("solver.prototxt");
  for (const auto& [old_name, new_name] : cases) {
    file.Write("base_lr: 0.01\nsolver_type: " + old_name + "\n");
    LogCapture log;
    caffe::SolverParameter solver = ReadSolverParameterFromTextFile(file.path());
    EXPECT_EQ(solver.type(), new_name);
    EXPECT_TRUE(solver.has_type());
    EXPECT_FALSE(solver.has_solver_type());
    EXPECT_FLOAT_EQ(solver.base_lr(), 0.01f);
    EXPECT_EQ(log.CountLines(file.path()), 1) << log.text();
    EXPECT_FALSE(SolverNeedsUpgrade(solver));
  }
  // Both fields set and agreeing is accepted.
  file.Write("solver_type: ADAM\ntype: \"Adam\"\n");
  EXPECT_EQ(ReadSolverParameterFromTextFile(file.path()).type(), "Adam");
}

TEST(UpgradeTest, SolverTypeConflictIsAParseError) {
  TempFile file("conflict_solver.prototxt");
  file.Write("solver_type: ADAM\ntype: \"SGD\"\n");
  ExpectError(ErrorCode::kParse, {file.path(), "ADAM", "\"SGD\""},
              [&] { ReadSolverParameterFromTextFile(file.path()); });
}

TEST(UpgradeTest, SolverEmbeddedNetsAreUpgraded) {
  caffe::SolverParameter solver;
  ReadProtoFromTextString(R"(
    type: "SGD"
    net_param { layers { name: "r" type: RELU bottom: "x" top: "x" } input: "x"
                input_dim: 1 input_dim: 1 input_dim: 1 input_dim: 2 }
    test_net_param { layers { name: "t" type: TANH bottom: "x" top: "x" } }
  )",
                          "<solver>", &solver);
  EXPECT_TRUE(SolverNeedsUpgrade(solver));
  EXPECT_TRUE(UpgradeSolverAsNeeded("embedded.prototxt", &solver));
  ASSERT_EQ(solver.net_param().layer_size(), 2);
  EXPECT_EQ(solver.net_param().layer(0).type(), "Input");
  EXPECT_EQ(solver.net_param().layer(1).type(), "ReLU");
  ASSERT_EQ(solver.test_net_param(0).layer_size(), 1);
  EXPECT_EQ(solver.test_net_param(0).layer(0).type(), "TanH");
  EXPECT_FALSE(SolverNeedsUpgrade(solver));
}

TEST(UpgradeTest, CurrentFormatPassesThroughUnchanged) {
  caffe::NetParameter param = NetParam(kLeNetCurrent);
  const std::string before = param.SerializeAsString();
  EXPECT_FALSE(NetNeedsUpgrade(param));
  LogCapture log;
  EXPECT_FALSE(UpgradeNetAsNeeded("current.prototxt", &param));
  EXPECT_EQ(param.SerializeAsString(), before);
  EXPECT_EQ(log.text(), "");
}

}  // namespace
}  // namespace cortado::io
