// SPDX-License-Identifier: Apache-2.0
#include "io/proto_io.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"

namespace cortado::io {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid())))
      .string();
}

void WriteText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(ProtoIoTest, SyntaxErrorReportsFileLineColumn) {
  const std::string path = TempPath("bad.prototxt");
  WriteText(path, "name: \"x\"\nlayer {\n  name: \"a\"\n  typo_field: 3\n}\n");
  caffe::NetParameter param;
  try {
    ReadProtoFromTextFile(path, &param);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path + ":4:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("typo_field"), std::string::npos) << msg;
  }
  std::remove(path.c_str());
}

TEST(ProtoIoTest, ABadValueNamesItsFieldThroughTheLinesText) {
  // The parser's own message names only the value; the line's text names the field.
  caffe::SolverParameter solver;
  try {
    ReadProtoFromTextString("net: \"n.prototxt\"\n  base_lr: fast   \n", "s.prototxt", &solver);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    EXPECT_EQ(std::string(e.what()),
              "s.prototxt:2:12: Expected double, got: fast (in `base_lr: fast`)");
  }
  // A long line is cut, bytes outside printable ASCII shown as '?'.
  const std::string lr = "base_lr: \"" + std::string(100, 'x') + "\xff\"\n";
  try {
    ReadProtoFromTextString(lr, "long.prototxt", &solver);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    const size_t quoted = msg.find("(in `base_lr: \"xxxx");
    ASSERT_NE(quoted, std::string::npos) << msg;
    EXPECT_EQ(msg.substr(msg.size() - 5), "...`)") << msg;
    EXPECT_EQ(msg.find('\xff', quoted), std::string::npos) << msg;
  }
}

TEST(ProtoIoTest, MissingFileIsNotFound) {
  caffe::NetParameter param;
  try {
    ReadProtoFromTextFile("/nonexistent/net.prototxt", &param);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/net.prototxt"), std::string::npos);
  }
}

TEST(ProtoIoTest, BinaryRoundTripAndTruncation) {
  caffe::NetParameter param;
  param.set_name("roundtrip");
  auto* layer = param.add_layer();
  layer->set_name("ip");
  layer->set_type("InnerProduct");
  auto* blob = layer->add_blobs();
  for (int i = 0; i < 100; ++i) blob->add_data(i * 0.25f);
  const std::string path = TempPath("model.caffemodel");
  WriteProtoToBinaryFile(param, path);
  caffe::NetParameter read;
  ReadProtoFromBinaryFile(path, &read);
  EXPECT_EQ(read.SerializeAsString(), param.SerializeAsString());

  // Truncate in the middle of the packed floats: an error naming the file, not a crash.
  std::string bytes = ReadFile(path);
  WriteFileAtomic(path, bytes.substr(0, bytes.size() / 2));
  try {
    ReadProtoFromBinaryFile(path, &read);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  std::remove(path.c_str());
}

// What Caffe accepts silently and Cortado refuses: an empty model, a directory named as a file,
// an empty net prototxt.
TEST(ProtoIoTest, EmptyFilesAndDirectoriesAreRefusedByName) {
  const std::string empty = TempPath("empty.caffemodel");
  WriteText(empty, "");
  caffe::NetParameter param;
  try {
    ReadProtoFromBinaryFile(empty, &param);
    FAIL() << "an empty model was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kParse);
    EXPECT_EQ(std::string(e.what()),
              "'" + empty + "' is empty (0 bytes), not a binary NetParameter");
  }
  const std::string dir = TempPath("a-directory");
  std::filesystem::create_directories(dir);
  try {
    ReadProtoFromBinaryFile(dir, &param);
    FAIL() << "a directory was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()), "'" + dir + "' is a directory, not a file");
  }
  const std::string net = TempPath("empty.prototxt");
  WriteText(net, "# nothing but a comment\n");
  try {
    ReadNetParameterFromTextFile(net);
    FAIL() << "an empty net was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()), net + ": the net defines no layers (an empty file?)");
  }
  std::remove(empty.c_str());
  std::remove(net.c_str());
  std::filesystem::remove(dir);
}

}  // namespace
}  // namespace cortado::io
