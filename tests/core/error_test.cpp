// SPDX-License-Identifier: Apache-2.0
// WithContext: an Error from the body comes back with the context in front of its message and
// the same code, file and line; values, references and void pass through; other exceptions are
// left alone.
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace cortado {
namespace {

TEST(WithContextTest, PrependsTheContextAndKeepsCodeFileAndLine) {
  int line = 0;
  try {
    WithContext("loading 'model.caffemodel'", [&] {
      line = __LINE__ + 1;
      CORTADO_THROW(kNotFound, "layer '{}' is missing", "conv1");
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "loading 'model.caffemodel': layer 'conv1' is missing");
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::strstr(e.file(), "error_test.cpp"), nullptr) << e.file();
    EXPECT_EQ(e.line(), line);
  }
}

TEST(WithContextTest, NestsOutermostFirst) {
  try {
    WithContext("outer", [] { WithContext("inner", [] { CORTADO_THROW(kIo, "disk full"); }); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "outer: inner: disk full");
    EXPECT_EQ(e.code(), ErrorCode::kIo);
  }
}

TEST(WithContextTest, ReturnsWhatTheBodyReturns) {
  EXPECT_EQ(WithContext("adding", [] { return 40 + 2; }), 42);
  EXPECT_EQ(WithContext("naming", [] { return std::string("cortado"); }), "cortado");
  int value = 1;
  int& ref = WithContext("referring", [&]() -> int& { return value; });
  ref = 7;
  EXPECT_EQ(value, 7);
  bool ran = false;
  WithContext("running", [&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(WithContextTest, LeavesOtherExceptionsAlone) {
  try {
    WithContext("context", [] { throw std::out_of_range("index 3"); });
    FAIL() << "no error";
  } catch (const Error&) {
    FAIL() << "turned into an Error";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "index 3");
  }
}

}  // namespace
}  // namespace cortado
