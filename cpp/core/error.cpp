// SPDX-License-Identifier: Apache-2.0
#include "core/error.hpp"

namespace cortado {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kParse:
      return "parse";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kComm:
      return "comm";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kAborted:
      return "aborted";
    case ErrorCode::kCuda:
      return "cuda";
    case ErrorCode::kOutOfMemory:
      return "out of memory";
    case ErrorCode::kUnimplemented:
      return "unimplemented";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

Error::Error(ErrorCode code, const std::string& message, const char* file, int line)
    : std::runtime_error(message), code_(code), file_(file), line_(line) {}

namespace detail {

void ThrowCheckFailure(const char* file, int line, const std::string& what,
                       const std::string& message) {
  std::string text = fmt::format("{}:{}: {}", file, line, what);
  if (!message.empty()) text += ": " + message;
  throw Error(ErrorCode::kInternal, text, file, line);
}

}  // namespace detail
}  // namespace cortado
