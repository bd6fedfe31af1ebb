// SPDX-License-Identifier: Apache-2.0
// .caffemodel files: what Cortado writes is what protoc (and so BVLC Caffe) reads, and what it
// reads back from a damaged file is an error, never a crash.
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "core/context.hpp"
#include "core/error.hpp"
#include "io/proto_io.hpp"
#include "net/net.hpp"

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

 private:
  std::string path_;
};

// Runs a shell command; returns its stdout and stderr, and its exit status in *status.
std::string RunCommand(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return output;
  }
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  *status = ::pclose(pipe);
  return output;
}

void AddBlob(caffe::LayerParameter* layer, const std::vector<int>& shape,
             const std::vector<float>& data) {
  caffe::BlobProto* blob = layer->add_blobs();
  for (int dim : shape) blob->mutable_shape()->add_dim(dim);
  for (float value : data) blob->add_data(value);
}

TEST(CaffemodelTest, WrittenModelDecodesWithProtoc) {
  if (std::system("protoc --version > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "protoc is not on PATH";
  }
  // A net of Input layers as Cortado writes it, plus a layer with hand-made weights.
  Context ctx(Device::Cpu(), 1701);
  caffe::NetParameter definition;
  ReadProtoFromTextString(R"(
    name: "tiny"
    layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
  )",
                          "<test>", &definition);
  Net net(definition, &ctx);
  caffe::NetParameter model;
  net.ToProto(&model);
  caffe::LayerParameter* ip = model.add_layer();
  ip->set_name("ip1");
  ip->set_type("InnerProduct");
  ip->add_bottom("data");
  ip->add_top("ip1");
  ip->add_param()->set_lr_mult(1.0f);
  ip->add_param()->set_lr_mult(2.0f);
  ip->mutable_inner_product_param()->set_num_output(2);
  AddBlob(ip, {2, 3}, {0.5f, -1.25f, 3.0f, 4.5f, -0.125f, 7.0f});
  AddBlob(ip, {2}, {0.25f, -8.0f});
  TempFile file("tiny.caffemodel");
  WriteProtoToBinaryFile(model, file.path());

  const std::string proto_dir = std::string(CORTADO_SOURCE_DIR) + "/proto";
  int status = 0;
  const std::string text =
      RunCommand("protoc --decode=caffe.NetParameter --proto_path='" + proto_dir + "' '" +
                     proto_dir + "/caffe.proto' < '" + file.path() + "'",
                 &status);
  ASSERT_EQ(status, 0) << text;
  for (const char* expected :
       {"name: \"tiny\"", "name: \"data\"", "type: \"Input\"", "name: \"ip1\"",
        "type: \"InnerProduct\"", "lr_mult: 2", "num_output: 2", "dim: 3", "data: 0.5",
        "data: -1.25", "data: -0.125", "data: -8"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << "'" << expected << "' missing:\n" << text;
  }
  // And the decoded text holds the whole message, not just those pieces.
  caffe::NetParameter decoded;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &decoded)) << text;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(decoded, model)) << text;
}

TEST(CaffemodelTest, RandomBytesAreAParseError) {
  TempFile file("random.caffemodel");
  std::mt19937 rng(1701);
  for (size_t size : {1u, 7u, 64u, 1000u, 65536u}) {
    std::string bytes(size, '\0');
    for (auto& byte : bytes) byte = static_cast<char>(rng() & 0xff);
    WriteFileAtomic(file.path(), bytes);
    try {
      ReadNetParameterFromBinaryFile(file.path());
      ADD_FAILURE() << size << " random bytes parsed as a NetParameter";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kParse) << e.what();
      EXPECT_NE(std::string(e.what()).find(file.path()), std::string::npos) << e.what();
    }
  }
}

TEST(CaffemodelTest, CorruptWeightsFileFailsCopyIntoNet) {
  Context ctx(Device::Cpu(), 1701);
  caffe::NetParameter definition;
  ReadProtoFromTextString(
      "layer { name: 'data' type: 'Input' top: 'data' input_param { shape { dim: 1 } } }", "<test>",
      &definition);
  Net net(definition, &ctx);
  TempFile file("corrupt.caffemodel");
  // A valid model with its tail cut off inside the packed weights, then random bytes appended.
  caffe::NetParameter model;
  caffe::LayerParameter* layer = model.add_layer();
  layer->set_name("data");
  AddBlob(layer, {64}, std::vector<float>(64, 1.5f));
  std::string bytes = model.SerializeAsString();
  bytes.resize(bytes.size() - 40);
  std::mt19937 rng(7);
  for (int i = 0; i < 24; ++i) bytes.push_back(static_cast<char>(rng() & 0xff));
  WriteFileAtomic(file.path(), bytes);
  try {
    net.CopyTrainedLayersFrom(file.path());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse) << e.what();
    EXPECT_NE(std::string(e.what()).find(file.path()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cortado::io
