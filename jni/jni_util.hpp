// SPDX-License-Identifier: Apache-2.0
// The JNI shim's toolkit: the one place where C++ errors become Java exceptions, RAII access to
// Java strings, arrays and direct buffers, and native objects handed to Java as jlong handles.
//
// Every exported function runs its body in Guard:
//
//   JNIEXPORT jfloat JNICALL Java_io_cortado_jni_NativeNet_forward(JNIEnv* env, jclass,
//                                                                 jlong handle) {
//     return jni::Guard(env, jfloat{0}, [&] { return jni::FromHandle<NetHandle>(handle).Forward();
//     });
//   }
//
// Guard catches everything: cortado::Error becomes the Java class its code maps to
// (docs/dev/errors.md), std::bad_alloc an OutOfMemoryError, anything else a CortadoException
// "internal: ...". A Java exception already pending (thrown by a JNI call inside the body) is
// never replaced. The helpers below throw JavaExceptionPending when a JNI call fails that way,
// which unwinds the body through its destructors and leaves the Java exception in place.
//
// The Java classes used here are looked up once in JNI_OnLoad (jni_util.cpp) and held as
// global references until JNI_OnUnload, so throwing works on any thread and class loader.
#pragma once

#include <jni.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace google::protobuf {
class Message;
}  // namespace google::protobuf

namespace cortado {
class BatchFeed;
namespace comm {
class Communicator;
}  // namespace comm
}  // namespace cortado

namespace cortado::jni {

// The JNI version the shim needs.
inline constexpr jint kJniVersion = JNI_VERSION_1_8;

// A JNI call left a Java exception pending; Guard lets it through unchanged.
class JavaExceptionPending final : public std::exception {
 public:
  const char* what() const noexcept override { return "a Java exception is pending"; }
};

// Throws JavaExceptionPending when a Java exception is pending.
void CheckJavaException(JNIEnv* env);

// The JNI name of the Java class an ErrorCode becomes ("io/cortado/CortadoConfigException").
const char* JavaExceptionClassName(ErrorCode code);

// Throws the Java exception for the exception being handled: call only inside a catch block.
// Does nothing when a Java exception is already pending.
void ThrowJavaForCurrentException(JNIEnv* env) noexcept;

// Runs body() and returns its value; on any C++ exception throws the matching Java exception
// and returns `fallback` (which Java never sees).
template <typename R, typename F>
R Guard(JNIEnv* env, R fallback, F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    ThrowJavaForCurrentException(env);
  }
  return fallback;
}

// The same for a body that returns nothing.
template <typename F>
void Guard(JNIEnv* env, F&& body) noexcept {
  try {
    body();
  } catch (...) {
    ThrowJavaForCurrentException(env);
  }
}

// ---- strings --------------------------------------------------------------------------------

// RAII over GetStringUTFChars. The bytes are Java's modified UTF-8, which differs from UTF-8 only
// for U+0000 and characters outside the Basic Multilingual Plane.
class StringChars {
 public:
  // `what` names the argument for the error a null string raises (kInvalidArgument).
  StringChars(JNIEnv* env, jstring string, const char* what);
  ~StringChars();
  StringChars(const StringChars&) = delete;
  StringChars& operator=(const StringChars&) = delete;

  const char* c_str() const { return chars_; }
  std::string str() const { return std::string(chars_, static_cast<size_t>(size_)); }

 private:
  JNIEnv* env_;
  jstring string_;
  const char* chars_;
  jsize size_;
};

// A copy of a Java string; null is kInvalidArgument naming `what`.
std::string ToStdString(JNIEnv* env, jstring string, const char* what);
// Copies of the strings of a String[]; a null array or element is kInvalidArgument naming `what`.
std::vector<std::string> ToStdStrings(JNIEnv* env, jobjectArray array, const char* what);

// New Java objects; a failed allocation leaves Java's OutOfMemoryError pending and throws
// JavaExceptionPending. Arrays over 2^31 - 1 elements are kInvalidArgument.
jstring NewString(JNIEnv* env, const std::string& text);
jobjectArray NewStringArray(JNIEnv* env, const std::vector<std::string>& strings);
jintArray NewIntArray(JNIEnv* env, const std::vector<int>& values);
jfloatArray NewFloatArray(JNIEnv* env, const std::vector<float>& values);
jbyteArray NewByteArray(JNIEnv* env, const std::string& bytes);
// A byte[][] holding one byte[] per element.
jobjectArray NewByteArrayArray(JNIEnv* env, const std::vector<std::string>& byte_strings);

// ---- arrays ---------------------------------------------------------------------------------

template <typename JArray>
struct ArrayTraits;
template <>
struct ArrayTraits<jbyteArray> {
  using Element = jbyte;
  static jbyte* Get(JNIEnv* env, jbyteArray a) { return env->GetByteArrayElements(a, nullptr); }
  static void Release(JNIEnv* env, jbyteArray a, jbyte* p, jint mode) {
    env->ReleaseByteArrayElements(a, p, mode);
  }
};
template <>
struct ArrayTraits<jintArray> {
  using Element = jint;
  static jint* Get(JNIEnv* env, jintArray a) { return env->GetIntArrayElements(a, nullptr); }
  static void Release(JNIEnv* env, jintArray a, jint* p, jint mode) {
    env->ReleaseIntArrayElements(a, p, mode);
  }
};
template <>
struct ArrayTraits<jfloatArray> {
  using Element = jfloat;
  static jfloat* Get(JNIEnv* env, jfloatArray a) { return env->GetFloatArrayElements(a, nullptr); }
  static void Release(JNIEnv* env, jfloatArray a, jfloat* p, jint mode) {
    env->ReleaseFloatArrayElements(a, p, mode);
  }
};

// RAII over Get/Release<Type>ArrayElements. Read-only by default: changes are copied back to
// Java only with write_back. A null array is kInvalidArgument naming `what`.
template <typename JArray>
class ArrayElements {
 public:
  using Element = typename ArrayTraits<JArray>::Element;

  ArrayElements(JNIEnv* env, JArray array, const char* what, bool write_back = false)
      : env_(env), array_(array), write_back_(write_back) {
    if (array == nullptr) CORTADO_THROW(kInvalidArgument, "{} is null", what);
    size_ = env->GetArrayLength(array);
    data_ = ArrayTraits<JArray>::Get(env, array);
    if (data_ == nullptr) {
      CheckJavaException(env);
      CORTADO_THROW(kOutOfMemory, "cannot access the Java array {}", what);
    }
  }
  ~ArrayElements() {
    ArrayTraits<JArray>::Release(env_, array_, data_, write_back_ ? 0 : JNI_ABORT);
  }
  ArrayElements(const ArrayElements&) = delete;
  ArrayElements& operator=(const ArrayElements&) = delete;

  Element* data() const { return data_; }
  size_t size() const { return static_cast<size_t>(size_); }
  Element* begin() const { return data_; }
  Element* end() const { return data_ + size_; }

 private:
  JNIEnv* env_;
  JArray array_;
  bool write_back_;
  jsize size_ = 0;
  Element* data_ = nullptr;
};

// A copy of a byte[] as bytes; null is kInvalidArgument naming `what`.
std::string ToBytes(JNIEnv* env, jbyteArray array, const char* what);

// ---- direct buffers -------------------------------------------------------------------------

// The memory of a direct java.nio.Buffer, from its address (position and limit are not applied).
struct DirectBuffer {
  void* data = nullptr;
  int64_t capacity = 0;  // in the buffer's elements: bytes for a ByteBuffer
};

// A null or non-direct buffer is kInvalidArgument naming `what`.
DirectBuffer GetDirectBuffer(JNIEnv* env, jobject buffer, const char* what);

// ---- protobuf messages as bytes ------------------------------------------------------------

// Parses a binary protobuf message from a Java byte[]; bytes that do not parse are kParse naming
// `source` and the size.
void ParseBinaryProto(JNIEnv* env, jbyteArray bytes, const std::string& source,
                      google::protobuf::Message* message);
// Serialises a message into a new byte[] (kInvalidArgument over 2 GiB).
jbyteArray SerializeToByteArray(JNIEnv* env, const google::protobuf::Message& message);

// ---- handles --------------------------------------------------------------------------------

// Hands ownership of `object` to Java as a jlong; Java frees it through one dispose native,
// which calls DisposeHandle<T>.
template <typename T>
jlong ToHandle(std::unique_ptr<T> object) {
  return static_cast<jlong>(reinterpret_cast<intptr_t>(object.release()));
}

// The object behind a handle. Zero is kInvalidArgument naming `what` (a closed object).
template <typename T>
T& FromHandle(jlong handle, const char* what) {
  if (handle == 0) CORTADO_THROW(kInvalidArgument, "{}: null handle (used after close?)", what);
  return *reinterpret_cast<T*>(static_cast<intptr_t>(handle));
}

// Frees the object behind a handle; zero is ignored.
template <typename T>
void DisposeHandle(jlong handle) noexcept {
  std::unique_ptr<T> owned(reinterpret_cast<T*>(static_cast<intptr_t>(handle)));
}

// ---- feeds ----------------------------------------------------------------------------------

// What a NativeFeed handle owns: a share of one feed layer's queue (NativeTrainer.feed and
// NativeNet.feed make them), so the handle outlives neither the memory nor the meaning of the
// queue: once the layer is gone, its feed is aborted and pushes throw.
struct FeedHandle {
  std::shared_ptr<BatchFeed> feed;
};

// ---- communicators --------------------------------------------------------------------------

// What a NativeComm communicator handle owns: a share of the communicator, which a trainer built
// with it shares too (TrainerOptions::comm).
struct CommHandle {
  std::shared_ptr<comm::Communicator> comm;
  // What the gradients travel as (NativeComm.setExchangePrecision); unset: the trainer's default.
  std::optional<comm::WireType> wire;
};

// The communicator behind a NativeComm handle (jni/native_comm_jni.cpp).
comm::Communicator& GetComm(jlong handle);

}  // namespace cortado::jni
