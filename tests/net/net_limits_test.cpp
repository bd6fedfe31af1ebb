// SPDX-License-Identifier: Apache-2.0
// Shapes that ask for more memory than tensors may hold are refused with the layer's name, and an
// error inside a layer's forward or backward names the layer.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "io/proto_io.hpp"
#include "net/net.hpp"

namespace cortado {
namespace {

caffe::NetParameter Parse(const std::string& text) {
  caffe::NetParameter param;
  io::ReadProtoFromTextString(text, "test", &param);
  return param;
}

// Restores the default limit when a test ends, whatever happens.
class HostMemoryLimitTest : public ::testing::Test {
 protected:
  void TearDown() override { SetHostMemoryLimit(0); }
};

std::string ErrorOf(const caffe::NetParameter& param, ErrorCode* code) {
  Context ctx(Device::Cpu(), 1);
  try {
    Net net(param, &ctx);
    net.Forward();
  } catch (const Error& e) {
    *code = e.code();
    return e.what();
  }
  return "";
}

TEST_F(HostMemoryLimitTest, DefaultIsThePhysicalMemory) {
  EXPECT_GT(HostMemoryLimit(), size_t{64} << 20);
  SetHostMemoryLimit(12345);
  EXPECT_EQ(HostMemoryLimit(), 12345u);
  SetHostMemoryLimit(0);
  EXPECT_GT(HostMemoryLimit(), size_t{64} << 20);
}

TEST_F(HostMemoryLimitTest, TopLargerThanTheLimitNamesTheLayer) {
  SetHostMemoryLimit(size_t{1} << 20);
  ErrorCode code = ErrorCode::kInternal;
  const std::string what = ErrorOf(Parse(R"(
    layer { name: "big_input" type: "Input" top: "data"
            input_param { shape { dim: 1 dim: 1 dim: 1000 dim: 1000 } } })"),
                                   &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << what;
  EXPECT_NE(what.find("layer 'big_input' (Input)"), std::string::npos) << what;
  EXPECT_NE(what.find("1 1 1000 1000"), std::string::npos) << what;
}

// The top fits; the weights the layer fills at set-up do not.
TEST_F(HostMemoryLimitTest, ParametersLargerThanTheLimitNameTheLayer) {
  SetHostMemoryLimit(size_t{4} << 20);
  ErrorCode code = ErrorCode::kInternal;
  const std::string what = ErrorOf(Parse(R"(
    layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 40000 } } }
    layer { name: "wide" type: "InnerProduct" bottom: "data" top: "ip"
            inner_product_param { num_output: 2000 weight_filler { type: "xavier" } } })"),
                                   &code);
  EXPECT_EQ(code, ErrorCode::kOutOfMemory) << what;
  EXPECT_NE(what.find("layer 'wide' (InnerProduct)"), std::string::npos) << what;
}

// A product of dimensions beyond INT_MAX at a convolution's output, with batch 0 (no elements in
// the top, so only the shape arithmetic can catch it).
TEST_F(HostMemoryLimitTest, OverflowingConvolutionShapesNameTheLayer) {
  ErrorCode code = ErrorCode::kInternal;
  const std::string what = ErrorOf(Parse(R"(
    layer { name: "data" type: "Input" top: "data"
            input_param { shape { dim: 0 dim: 1 dim: 100000 dim: 100000 } } }
    layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
            convolution_param { num_output: 1 kernel_size: 1 } })"),
                                   &code);
  EXPECT_NE(what.find("layer 'conv' (Convolution)"), std::string::npos) << what;
}

// A convolution over a bottom of 0 channels (found by fuzzing: its column-buffer arithmetic
// divided by zero in forward) is refused at set-up.
TEST(NetErrorContextTest, ConvolutionOverNoChannelsIsRefused) {
  ErrorCode code = ErrorCode::kInternal;
  const std::string what = ErrorOf(Parse(R"(
    layer { name: "data" type: "Input" top: "data"
            input_param { shape { dim: 2 dim: 0 dim: 6 dim: 6 } } }
    layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
            convolution_param { num_output: 4 kernel_h: 3 kernel_w: 2 } })"),
                                   &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument) << what;
  EXPECT_NE(what.find("layer 'conv' (Convolution)"), std::string::npos) << what;
  EXPECT_NE(what.find("has no channels on axis 1"), std::string::npos) << what;
}

TEST(NetErrorContextTest, ForwardErrorsNameTheLayer) {
  ErrorCode code = ErrorCode::kInternal;
  const std::string what = ErrorOf(Parse(R"(
    layer { name: "data" type: "DummyData" top: "x" top: "label"
            dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 }
                               data_filler { type: "constant" value: 0 }
                               data_filler { type: "constant" value: 7 } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "x" bottom: "label" top: "loss" })"),
                                   &code);
  EXPECT_NE(what.find("forward of layer 'loss' (SoftmaxWithLoss)"), std::string::npos) << what;
}

// A .caffemodel whose bytes were damaged inside its float data still parses; the values that
// became NaN or infinity are caught when the weights are copied, naming the layer and blob.
TEST(NetErrorContextTest, NonFiniteWeightsAreRefused) {
  Context ctx(Device::Cpu(), 1);
  Net net(Parse(R"(
    layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
            inner_product_param { num_output: 2 } })"),
          &ctx);
  caffe::NetParameter trained;
  net.ToProto(&trained);
  caffe::LayerParameter* ip = nullptr;
  for (auto& layer : *trained.mutable_layer()) {
    if (layer.name() == "ip") ip = &layer;
  }
  ASSERT_NE(ip, nullptr);
  net.CopyTrainedLayersFrom(trained);  // finite: loads
  ip->mutable_blobs(1)->set_data(1, std::numeric_limits<float>::infinity());
  try {
    net.CopyTrainedLayersFrom(trained);
    FAIL() << "an infinite bias was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'ip' (InnerProduct): blob 1 holds inf at index 1"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cortado
