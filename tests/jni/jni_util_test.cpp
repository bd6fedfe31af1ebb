// SPDX-License-Identifier: Apache-2.0
// jni::Guard and the JNI helpers against a real JVM: every ErrorCode becomes the Java class that
// docs/dev/errors.md lists, with the native message; std::bad_alloc, other exceptions and
// non-exceptions are mapped too; a pending Java exception is never replaced. The JVM runs with
// -Xcheck:jni, which prints a warning for each JNI misuse (a call not checked for exceptions).
#include "jni/jni_util.hpp"

#include <gtest/gtest.h>
#include <jni.h>

#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace cortado::jni {
namespace {

// JNI allows one JVM per process: created on first use, with the Java classes the shim throws
// on its class path; JNI_OnLoad is called by hand as System.load would. Null if that failed.
JNIEnv* Env() {
  static JNIEnv* env = []() -> JNIEnv* {
    std::string class_path = "-Djava.class.path=" CORTADO_JNI_CLASSES_DIR;
    std::string check = "-Xcheck:jni";
    JavaVMOption options[2] = {{class_path.data(), nullptr}, {check.data(), nullptr}};
    JavaVMInitArgs args{};
    args.version = kJniVersion;
    args.nOptions = 2;
    args.options = options;
    args.ignoreUnrecognized = JNI_FALSE;
    JavaVM* vm = nullptr;
    JNIEnv* created = nullptr;
    if (JNI_CreateJavaVM(&vm, reinterpret_cast<void**>(&created), &args) != JNI_OK) return nullptr;
    if (JNI_OnLoad(vm, nullptr) != kJniVersion) return nullptr;
    return created;
  }();
  return env;
}

// The pending Java exception's class name and message (cleared); empty if none.
struct Thrown {
  std::string class_name;
  std::string message;
};

Thrown TakePending(JNIEnv* env) {
  Thrown result;
  jthrowable thrown = env->ExceptionOccurred();
  if (thrown == nullptr) return result;
  env->ExceptionClear();
  env->PushLocalFrame(16);
  jclass class_class = env->FindClass("java/lang/Class");
  jmethodID get_name = env->GetMethodID(class_class, "getName", "()Ljava/lang/String;");
  auto name = static_cast<jstring>(env->CallObjectMethod(env->GetObjectClass(thrown), get_name));
  EXPECT_FALSE(env->ExceptionCheck());
  jclass throwable = env->FindClass("java/lang/Throwable");
  jmethodID get_message = env->GetMethodID(throwable, "getMessage", "()Ljava/lang/String;");
  auto message = static_cast<jstring>(env->CallObjectMethod(thrown, get_message));
  EXPECT_FALSE(env->ExceptionCheck());
  result.class_name = ToStdString(env, name, "name");
  if (message != nullptr) result.message = ToStdString(env, message, "message");
  env->PopLocalFrame(nullptr);
  env->DeleteLocalRef(thrown);
  return result;
}

class JniUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = Env();
    ASSERT_NE(env_, nullptr) << "cannot start a JVM with class path " CORTADO_JNI_CLASSES_DIR;
  }
  JNIEnv* env_ = nullptr;
};

TEST_F(JniUtilTest, ReturnsTheBodysValueWhenNothingIsThrown) {
  EXPECT_EQ(Guard(env_, -1, [] { return 42; }), 42);
  EXPECT_FALSE(env_->ExceptionCheck());
}

// The table of docs/dev/errors.md.
TEST_F(JniUtilTest, EachErrorCodeBecomesItsDocumentedJavaClass) {
  const std::vector<std::pair<ErrorCode, std::string>> table = {
      {ErrorCode::kInvalidArgument, "io.cortado.CortadoConfigException"},
      {ErrorCode::kParse, "io.cortado.CortadoConfigException"},
      {ErrorCode::kNotFound, "io.cortado.CortadoIOException"},
      {ErrorCode::kIo, "io.cortado.CortadoIOException"},
      {ErrorCode::kComm, "io.cortado.CortadoCommException"},
      {ErrorCode::kTimeout, "io.cortado.CortadoCommException"},
      {ErrorCode::kAborted, "io.cortado.CortadoCommException"},
      {ErrorCode::kCuda, "io.cortado.CortadoCudaException"},
      {ErrorCode::kOutOfMemory, "java.lang.OutOfMemoryError"},
      {ErrorCode::kUnimplemented, "io.cortado.CortadoException"},
      {ErrorCode::kInternal, "io.cortado.CortadoException"},
  };
  for (const auto& [code, java_class] : table) {
    const std::string message = std::string("net.prototxt:4:13: ") + ErrorCodeName(code);
    const int result = Guard(env_, -1, [&]() -> int { throw Error(code, message); });
    EXPECT_EQ(result, -1);
    const Thrown thrown = TakePending(env_);
    EXPECT_EQ(thrown.class_name, java_class) << ErrorCodeName(code);
    EXPECT_EQ(thrown.message, message);
    std::string jni_name = java_class;
    for (char& c : jni_name) c = c == '.' ? '/' : c;
    EXPECT_EQ(JavaExceptionClassName(code), jni_name);
  }
}

TEST_F(JniUtilTest, BadAllocIsOutOfMemoryError) {
  Guard(env_, [] { throw std::bad_alloc(); });
  EXPECT_EQ(TakePending(env_).class_name, "java.lang.OutOfMemoryError");
}

TEST_F(JniUtilTest, OtherExceptionsAreInternalCortadoExceptions) {
  Guard(env_, [] { throw std::out_of_range("index 7 of 3"); });
  Thrown thrown = TakePending(env_);
  EXPECT_EQ(thrown.class_name, "io.cortado.CortadoException");
  EXPECT_EQ(thrown.message, "internal: index 7 of 3");

  Guard(env_, [] { throw 42; });
  thrown = TakePending(env_);
  EXPECT_EQ(thrown.class_name, "io.cortado.CortadoException");
  EXPECT_EQ(thrown.message, "internal: unknown C++ exception");
}

TEST_F(JniUtilTest, APendingJavaExceptionIsNeverReplaced) {
  jclass illegal_state = env_->FindClass("java/lang/IllegalStateException");
  ASSERT_NE(illegal_state, nullptr);
  // A JNI call failed, and the helper noticed.
  Guard(env_, [&] {
    env_->ThrowNew(illegal_state, "from Java");
    CheckJavaException(env_);
    FAIL() << "CheckJavaException did not throw";
  });
  Thrown thrown = TakePending(env_);
  EXPECT_EQ(thrown.class_name, "java.lang.IllegalStateException");
  EXPECT_EQ(thrown.message, "from Java");
  // A C++ error thrown while a Java exception is pending does not replace it either.
  Guard(env_, [&] {
    env_->ThrowNew(illegal_state, "first");
    CORTADO_THROW(kInternal, "second");
  });
  thrown = TakePending(env_);
  EXPECT_EQ(thrown.class_name, "java.lang.IllegalStateException");
  EXPECT_EQ(thrown.message, "first");
  env_->DeleteLocalRef(illegal_state);
}

TEST_F(JniUtilTest, ContextAddedOnTheWayUpReachesJava) {
  Guard(env_, [] { WithContext("net.prototxt", [] { CORTADO_THROW(kNotFound, "layer 'x'"); }); });
  const Thrown thrown = TakePending(env_);
  EXPECT_EQ(thrown.class_name, "io.cortado.CortadoIOException");
  EXPECT_EQ(thrown.message, "net.prototxt: layer 'x'");
}

struct Counted {
  explicit Counted(int* deletions) : deletions_(deletions) {}
  ~Counted() { ++*deletions_; }
  int* deletions_;
};

TEST_F(JniUtilTest, HandlesOwnTheirObjectUntilDisposed) {
  int deletions = 0;
  const jlong handle = ToHandle(std::make_unique<Counted>(&deletions));
  ASSERT_NE(handle, 0);
  EXPECT_EQ(FromHandle<Counted>(handle, "Counted").deletions_, &deletions);
  EXPECT_EQ(deletions, 0);
  DisposeHandle<Counted>(handle);
  EXPECT_EQ(deletions, 1);
  DisposeHandle<Counted>(0);  // a no-op
  try {
    FromHandle<Counted>(0, "Counted");
    FAIL() << "no error for a null handle";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(e.what(), "Counted: null handle (used after close?)");
  }
}

TEST_F(JniUtilTest, StringsAndArraysRoundTrip) {
  env_->PushLocalFrame(16);
  jobjectArray strings = NewStringArray(env_, {"data", "ip", ""});
  ASSERT_EQ(env_->GetArrayLength(strings), 3);
  auto element = static_cast<jstring>(env_->GetObjectArrayElement(strings, 1));
  ASSERT_FALSE(env_->ExceptionCheck());
  EXPECT_EQ(ToStdString(env_, element, "element"), "ip");
  jintArray ints = NewIntArray(env_, {2, 3, 5});
  {
    ArrayElements<jintArray> view(env_, ints, "ints");
    EXPECT_EQ(std::vector<int>(view.begin(), view.end()), (std::vector<int>{2, 3, 5}));
  }
  jbyteArray bytes = NewByteArray(env_, std::string("\x01\x00\x7f", 3));
  {
    ArrayElements<jbyteArray> view(env_, bytes, "bytes");
    ASSERT_EQ(view.size(), 3u);
    EXPECT_EQ(view.data()[2], 0x7f);
  }
  jobjectArray nested = NewByteArrayArray(env_, {"ab", ""});
  EXPECT_EQ(env_->GetArrayLength(nested), 2);
  auto first = static_cast<jarray>(env_->GetObjectArrayElement(nested, 0));
  ASSERT_FALSE(env_->ExceptionCheck());
  EXPECT_EQ(env_->GetArrayLength(first), 2);
  EXPECT_THROW(ToStdString(env_, nullptr, "prototxt"), Error);
  EXPECT_THROW(ArrayElements<jintArray>(env_, nullptr, "shape"), Error);
  EXPECT_FALSE(env_->ExceptionCheck());
  env_->PopLocalFrame(nullptr);
}

TEST_F(JniUtilTest, OnlyDirectBuffersAreAccepted) {
  float storage[4] = {};
  jobject direct = env_->NewDirectByteBuffer(storage, sizeof(storage));
  ASSERT_NE(direct, nullptr);
  const DirectBuffer buffer = GetDirectBuffer(env_, direct, "buffer");
  EXPECT_EQ(buffer.data, static_cast<void*>(storage));
  EXPECT_EQ(buffer.capacity, static_cast<int64_t>(sizeof(storage)));
  EXPECT_THROW(GetDirectBuffer(env_, nullptr, "buffer"), Error);
  // A heap buffer: ByteBuffer.allocate(16).
  jclass byte_buffer = env_->FindClass("java/nio/ByteBuffer");
  jmethodID allocate = env_->GetStaticMethodID(byte_buffer, "allocate", "(I)Ljava/nio/ByteBuffer;");
  jobject heap = env_->CallStaticObjectMethod(byte_buffer, allocate, 16);
  ASSERT_FALSE(env_->ExceptionCheck());
  ASSERT_NE(heap, nullptr);
  try {
    GetDirectBuffer(env_, heap, "batch");
    FAIL() << "a heap buffer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch is not a direct buffer"), std::string::npos);
  }
  env_->DeleteLocalRef(heap);
  env_->DeleteLocalRef(byte_buffer);
  env_->DeleteLocalRef(direct);
}

}  // namespace
}  // namespace cortado::jni
