// SPDX-License-Identifier: Apache-2.0
// The one exception type of Cortado, and the macros that throw it.
//
// Expected failures (bad input, I/O, a lost peer) use CORTADO_THROW with the code that fits;
// broken invariants use CORTADO_CHECK*, which throw kInternal and print the values involved.
// Nothing in the library aborts the process: the JNI shim turns an Error into a Java exception.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace cortado {

enum class ErrorCode {
  kInvalidArgument,
  kParse,
  kNotFound,
  kIo,
  kComm,
  kTimeout,
  kAborted,
  kCuda,
  kOutOfMemory,
  kUnimplemented,
  kInternal,
};

// The lower-case name of a code ("invalid argument", "parse", ...).
const char* ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  // `message` is what the user reads; file/line are where it was thrown (for debugging).
  Error(ErrorCode code, const std::string& message, const char* file = "", int line = 0);

  ErrorCode code() const noexcept { return code_; }
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  ErrorCode code_;
  const char* file_;
  int line_;
};

// Runs body() and returns what it returns; an Error it throws is rethrown with "context: " in
// front of its message, with the same code, file and line (errors gather context on their way
// up, as XGBoost's do). Other exceptions pass through unchanged. For example
//   WithContext(path, [&] { net->CopyTrainedLayersFrom(weights); });
// turns "layer 'conv1' ..." into "<path>: layer 'conv1' ...".
template <typename F>
decltype(auto) WithContext(const std::string& context, F&& body) {
  try {
    return std::forward<F>(body)();
  } catch (const Error& e) {
    throw Error(e.code(), context + ": " + e.what(), e.file(), e.line());
  }
}

namespace detail {

[[noreturn]] void ThrowCheckFailure(const char* file, int line, const std::string& what,
                                    const std::string& message);

inline std::string FormatOptional() { return {}; }
template <typename... Args>
std::string FormatOptional(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}

}  // namespace detail
}  // namespace cortado

// CORTADO_THROW(kParse, "{}:{}: unknown field", file, line)
#define CORTADO_THROW(code, ...) \
  throw ::cortado::Error(::cortado::ErrorCode::code, ::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

// CORTADO_CHECK(cond) or CORTADO_CHECK(cond, "context {}", x): throws kInternal.
#define CORTADO_CHECK(cond, ...)                                                            \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      ::cortado::detail::ThrowCheckFailure(__FILE__, __LINE__, "check failed: " #cond,      \
                                           ::cortado::detail::FormatOptional(__VA_ARGS__)); \
    }                                                                                       \
  } while (0)

#define CORTADO_CHECK_OP_(op, a, b, ...)                                                     \
  do {                                                                                       \
    const auto& cortado_check_a_ = (a);                                                      \
    const auto& cortado_check_b_ = (b);                                                      \
    if (!(cortado_check_a_ op cortado_check_b_)) {                                           \
      ::cortado::detail::ThrowCheckFailure(                                                  \
          __FILE__, __LINE__,                                                                \
          ::fmt::format("check failed: {} {} {} ({} vs. {})", #a, #op, #b, cortado_check_a_, \
                        cortado_check_b_),                                                   \
          ::cortado::detail::FormatOptional(__VA_ARGS__));                                   \
    }                                                                                        \
  } while (0)

#define CORTADO_CHECK_EQ(a, b, ...) CORTADO_CHECK_OP_(==, a, b, ##__VA_ARGS__)
#define CORTADO_CHECK_NE(a, b, ...) CORTADO_CHECK_OP_(!=, a, b, ##__VA_ARGS__)
#define CORTADO_CHECK_LT(a, b, ...) CORTADO_CHECK_OP_(<, a, b, ##__VA_ARGS__)
#define CORTADO_CHECK_LE(a, b, ...) CORTADO_CHECK_OP_(<=, a, b, ##__VA_ARGS__)
#define CORTADO_CHECK_GT(a, b, ...) CORTADO_CHECK_OP_(>, a, b, ##__VA_ARGS__)
#define CORTADO_CHECK_GE(a, b, ...) CORTADO_CHECK_OP_(>=, a, b, ##__VA_ARGS__)
