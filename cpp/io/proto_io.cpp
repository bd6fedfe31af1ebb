// SPDX-License-Identifier: Apache-2.0
#include "io/proto_io.hpp"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "io/upgrade.hpp"

namespace cortado::io {
namespace {

// Collects the text parser's first error as "source:line:column: message".
class ErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  ErrorCollector(std::string source, const std::string& text)
      : source_(std::move(source)), text_(text) {}
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) {
      // The parser counts from zero; editors count from one. The line's text follows, so that
      // the field is named also where the parser's message names only the value ("Expected
      // double, got: fast").
      first_ = fmt::format("{}:{}:{}: {}", source_, line + 1, column + 1, message);
      const std::string quoted = LineText(line);
      if (!quoted.empty()) first_ += fmt::format(" (in `{}`)", quoted);
    }
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  // Line `line` (from zero) of the text, trimmed, at most 80 characters, anything but printable
  // ASCII shown as '?'; empty when there is no such line.
  std::string LineText(int line) const {
    size_t start = 0;
    for (int i = 0; i < line; ++i) {
      start = text_.find('\n', start);
      if (start == std::string::npos) return "";
      ++start;
    }
    size_t end = text_.find('\n', start);
    if (end == std::string::npos) end = text_.size();
    while (start < end && std::isspace(static_cast<unsigned char>(text_[start])) != 0) ++start;
    while (end > start && std::isspace(static_cast<unsigned char>(text_[end - 1])) != 0) --end;
    std::string out = text_.substr(start, std::min<size_t>(end - start, 80));
    for (char& c : out) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    if (end - start > 80) out += "...";
    return out;
  }

  std::string source_;
  const std::string& text_;
  std::string first_;
};

}  // namespace

std::string ReadFile(const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    CORTADO_THROW(kInvalidArgument, "'{}' is a directory, not a file", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    CORTADO_THROW(kNotFound, "cannot open '{}': {}", path, std::strerror(errno));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) CORTADO_THROW(kIo, "error reading '{}'", path);
  return buffer.str();
}

void WriteFileAtomic(const std::string& path, const std::string& bytes) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) CORTADO_THROW(kIo, "cannot create '{}': {}", temp, std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      CORTADO_THROW(kIo, "cannot write '{}': {}", temp, std::strerror(err));
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    CORTADO_THROW(kIo, "cannot flush '{}': {}", temp, std::strerror(err));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    CORTADO_THROW(kIo, "cannot rename '{}' to '{}': {}", temp, path, std::strerror(err));
  }
}

void ReadProtoFromTextString(const std::string& text, const std::string& source,
                             google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  ErrorCollector errors(source, text);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, message)) {
    CORTADO_THROW(kParse, "{}",
                  errors.first().empty() ? source + ": cannot parse" : errors.first());
  }
}

void ReadProtoFromTextFile(const std::string& path, google::protobuf::Message* message) {
  ReadProtoFromTextString(ReadFile(path), path, message);
}

void ReadProtoFromBinaryFile(const std::string& path, google::protobuf::Message* message) {
  const std::string bytes = ReadFile(path);
  if (bytes.empty()) {
    CORTADO_THROW(kParse, "'{}' is empty (0 bytes), not a binary {}", path,
                  message->GetDescriptor()->name());
  }
  google::protobuf::io::ArrayInputStream array(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream coded(&array);
  coded.SetTotalBytesLimit(INT_MAX);
  if (!message->ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
    CORTADO_THROW(kParse, "'{}' is not a valid binary {} ({} bytes): truncated or corrupt", path,
                  message->GetDescriptor()->name(), bytes.size());
  }
}

void WriteProtoToTextFile(const google::protobuf::Message& message, const std::string& path) {
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(message, &text)) {
    CORTADO_THROW(kInternal, "cannot print {} as text", message.GetDescriptor()->name());
  }
  WriteFileAtomic(path, text);
}

void WriteProtoToBinaryFile(const google::protobuf::Message& message, const std::string& path) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    CORTADO_THROW(kInternal, "cannot serialise {} (over 2 GiB?)", message.GetDescriptor()->name());
  }
  WriteFileAtomic(path, bytes);
}

void CheckNetHasLayers(const caffe::NetParameter& param, const std::string& source) {
  if (param.layer_size() == 0 && param.layers_size() == 0) {
    CORTADO_THROW(kInvalidArgument, "{}: the net defines no layers{}", source,
                  param.input_size() > 0 ? "" : " (an empty file?)");
  }
}

caffe::NetParameter ReadNetParameterFromTextFile(const std::string& path) {
  caffe::NetParameter param;
  ReadProtoFromTextFile(path, &param);
  UpgradeNetAsNeeded(path, &param);
  CheckNetHasLayers(param, path);
  return param;
}

caffe::NetParameter ReadNetParameterFromBinaryFile(const std::string& path) {
  caffe::NetParameter param;
  ReadProtoFromBinaryFile(path, &param);
  UpgradeNetAsNeeded(path, &param);
  return param;
}

caffe::SolverParameter ReadSolverParameterFromTextFile(const std::string& path) {
  caffe::SolverParameter param;
  ReadProtoFromTextFile(path, &param);
  UpgradeSolverAsNeeded(path, &param);
  return param;
}

}  // namespace cortado::io
