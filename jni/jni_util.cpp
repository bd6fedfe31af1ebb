// SPDX-License-Identifier: Apache-2.0
#include "jni/jni_util.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/message.h>

#include <climits>
#include <new>

#include "core/config.hpp"
#include "core/logging.hpp"
#if CORTADO_WITH_UCX
#include "comm/ucx/ucx_communicator.hpp"
#endif

namespace cortado::jni {
namespace {

// The Java classes the shim throws or creates, as global references (JNI_OnLoad).
enum ClassId {
  kCortadoException,
  kCortadoConfigException,
  kCortadoIOException,
  kCortadoCommException,
  kCortadoCudaException,
  kOutOfMemoryError,
  kString,
  kByteArray,
  kNumClasses,
};

constexpr const char* kClassNames[kNumClasses] = {
    "io/cortado/CortadoException",
    "io/cortado/CortadoConfigException",
    "io/cortado/CortadoIOException",
    "io/cortado/CortadoCommException",
    "io/cortado/CortadoCudaException",
    "java/lang/OutOfMemoryError",
    "java/lang/String",
    "[B",
};

jclass g_classes[kNumClasses] = {};

ClassId ClassFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kParse:
      return kCortadoConfigException;
    case ErrorCode::kNotFound:
    case ErrorCode::kIo:
      return kCortadoIOException;
    case ErrorCode::kComm:
    case ErrorCode::kTimeout:
    case ErrorCode::kAborted:
      return kCortadoCommException;
    case ErrorCode::kCuda:
      return kCortadoCudaException;
    case ErrorCode::kOutOfMemory:
      return kOutOfMemoryError;
    case ErrorCode::kUnimplemented:
    case ErrorCode::kInternal:
      return kCortadoException;
  }
  return kCortadoException;
}

void ReleaseClasses(JNIEnv* env) {
  for (jclass& cls : g_classes) {
    if (cls != nullptr) env->DeleteGlobalRef(cls);
    cls = nullptr;
  }
}

// Throws a Java exception of class `id`; if that fails (no class, or no memory for the message)
// the JVM has left its own exception pending, which is just as good.
void ThrowJava(JNIEnv* env, ClassId id, const char* message) noexcept {
  jclass cls = g_classes[id];
  if (cls == nullptr) cls = g_classes[kCortadoException];
  // Null only if JNI_OnLoad failed, and then no native method was ever bound.
  if (cls != nullptr) env->ThrowNew(cls, message);
}

// "internal: " + what, without letting an allocation failure escape.
void ThrowInternal(JNIEnv* env, const char* what) noexcept {
  try {
    ThrowJava(env, kCortadoException, (std::string("internal: ") + what).c_str());
  } catch (...) {
    ThrowJava(env, kCortadoException, "internal: (message lost: out of memory)");
  }
}

}  // namespace

void CheckJavaException(JNIEnv* env) {
  if (env->ExceptionCheck()) throw JavaExceptionPending();
}

const char* JavaExceptionClassName(ErrorCode code) { return kClassNames[ClassFor(code)]; }

void ThrowJavaForCurrentException(JNIEnv* env) noexcept {
  // A Java exception thrown by a JNI call in the body says more than ours would.
  if (env->ExceptionCheck()) return;
  try {
    throw;
  } catch (const JavaExceptionPending&) {
    ThrowInternal(env, "a JNI call failed without leaving a Java exception");
  } catch (const Error& e) {
    ThrowJava(env, ClassFor(e.code()), e.what());
  } catch (const std::bad_alloc& e) {
    ThrowJava(env, kOutOfMemoryError, e.what());
  } catch (const std::exception& e) {
    ThrowInternal(env, e.what());
  } catch (...) {
    ThrowInternal(env, "unknown C++ exception");
  }
}

// ---- strings --------------------------------------------------------------------------------

StringChars::StringChars(JNIEnv* env, jstring string, const char* what)
    : env_(env), string_(string), chars_(nullptr), size_(0) {
  if (string == nullptr) CORTADO_THROW(kInvalidArgument, "{} is null", what);
  size_ = env->GetStringUTFLength(string);
  chars_ = env->GetStringUTFChars(string, nullptr);
  if (chars_ == nullptr) {
    CheckJavaException(env);
    CORTADO_THROW(kOutOfMemory, "cannot access the Java string {}", what);
  }
}

StringChars::~StringChars() { env_->ReleaseStringUTFChars(string_, chars_); }

std::string ToStdString(JNIEnv* env, jstring string, const char* what) {
  return StringChars(env, string, what).str();
}

std::vector<std::string> ToStdStrings(JNIEnv* env, jobjectArray array, const char* what) {
  if (array == nullptr) CORTADO_THROW(kInvalidArgument, "{} is null", what);
  std::vector<std::string> result;
  const jsize n = env->GetArrayLength(array);
  for (jsize i = 0; i < n; ++i) {
    auto element = static_cast<jstring>(env->GetObjectArrayElement(array, i));
    CheckJavaException(env);
    result.push_back(ToStdString(env, element, what));
    env->DeleteLocalRef(element);
  }
  return result;
}

std::string ToBytes(JNIEnv* env, jbyteArray array, const char* what) {
  ArrayElements<jbyteArray> bytes(env, array, what);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

namespace {

jsize CheckedLength(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX)) {
    CORTADO_THROW(kInvalidArgument, "{} of {} elements does not fit a Java array", what, n);
  }
  return static_cast<jsize>(n);
}

// Deletes a local reference when it goes out of scope.
struct LocalRef {
  JNIEnv* env;
  jobject ref;
  ~LocalRef() {
    if (ref != nullptr) env->DeleteLocalRef(ref);
  }
};

}  // namespace

jstring NewString(JNIEnv* env, const std::string& text) {
  jstring result = env->NewStringUTF(text.c_str());
  if (result == nullptr) {
    CheckJavaException(env);
    throw std::bad_alloc();
  }
  return result;
}

jobjectArray NewStringArray(JNIEnv* env, const std::vector<std::string>& strings) {
  jobjectArray array =
      env->NewObjectArray(CheckedLength(strings.size(), "a String[]"), g_classes[kString], nullptr);
  CheckJavaException(env);
  for (size_t i = 0; i < strings.size(); ++i) {
    LocalRef element{env, NewString(env, strings[i])};
    env->SetObjectArrayElement(array, static_cast<jsize>(i), element.ref);
    CheckJavaException(env);
  }
  return array;
}

jintArray NewIntArray(JNIEnv* env, const std::vector<int>& values) {
  const jsize n = CheckedLength(values.size(), "an int[]");
  jintArray array = env->NewIntArray(n);
  CheckJavaException(env);
  env->SetIntArrayRegion(array, 0, n, values.data());
  CheckJavaException(env);
  return array;
}

jfloatArray NewFloatArray(JNIEnv* env, const std::vector<float>& values) {
  const jsize n = CheckedLength(values.size(), "a float[]");
  jfloatArray array = env->NewFloatArray(n);
  CheckJavaException(env);
  env->SetFloatArrayRegion(array, 0, n, values.data());
  CheckJavaException(env);
  return array;
}

jobjectArray NewByteArrayArray(JNIEnv* env, const std::vector<std::string>& byte_strings) {
  jobjectArray array = env->NewObjectArray(CheckedLength(byte_strings.size(), "a byte[][]"),
                                           g_classes[kByteArray], nullptr);
  CheckJavaException(env);
  for (size_t i = 0; i < byte_strings.size(); ++i) {
    LocalRef element{env, NewByteArray(env, byte_strings[i])};
    env->SetObjectArrayElement(array, static_cast<jsize>(i), element.ref);
    CheckJavaException(env);
  }
  return array;
}

jbyteArray NewByteArray(JNIEnv* env, const std::string& bytes) {
  const jsize n = CheckedLength(bytes.size(), "a byte[]");
  jbyteArray array = env->NewByteArray(n);
  CheckJavaException(env);
  env->SetByteArrayRegion(array, 0, n, reinterpret_cast<const jbyte*>(bytes.data()));
  CheckJavaException(env);
  return array;
}

// ---- direct buffers -------------------------------------------------------------------------

DirectBuffer GetDirectBuffer(JNIEnv* env, jobject buffer, const char* what) {
  if (buffer == nullptr) CORTADO_THROW(kInvalidArgument, "{} is null", what);
  DirectBuffer result;
  result.data = env->GetDirectBufferAddress(buffer);
  result.capacity = env->GetDirectBufferCapacity(buffer);
  if (result.data == nullptr || result.capacity < 0) {
    CORTADO_THROW(kInvalidArgument,
                  "{} is not a direct buffer (use ByteBuffer.allocateDirect): data crosses JNI "
                  "only through direct buffers",
                  what);
  }
  return result;
}

// ---- protobuf messages as bytes ------------------------------------------------------------

void ParseBinaryProto(JNIEnv* env, jbyteArray bytes, const std::string& source,
                      google::protobuf::Message* message) {
  ArrayElements<jbyteArray> data(env, bytes, source.c_str());
  if (data.size() == 0) {
    CORTADO_THROW(kParse, "'{}' is empty (0 bytes), not a binary {}", source,
                  message->GetDescriptor()->name());
  }
  google::protobuf::io::ArrayInputStream array(data.data(), static_cast<int>(data.size()));
  google::protobuf::io::CodedInputStream coded(&array);
  coded.SetTotalBytesLimit(INT_MAX);
  if (!message->ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
    CORTADO_THROW(kParse, "'{}' is not a valid binary {} ({} bytes): truncated or corrupt", source,
                  message->GetDescriptor()->name(), data.size());
  }
}

jbyteArray SerializeToByteArray(JNIEnv* env, const google::protobuf::Message& message) {
  std::string bytes;
  if (!message.SerializeToString(&bytes)) {
    CORTADO_THROW(kInvalidArgument, "cannot serialise {} (over 2 GiB?)",
                  message.GetDescriptor()->name());
  }
  return NewByteArray(env, bytes);
}

}  // namespace cortado::jni

// ---- library load and unload ----------------------------------------------------------------

// Caches the classes the shim uses. A class that cannot be found fails the load (System.load
// throws), naming the class in the log.
extern "C" JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void* /*reserved*/) {
  using namespace cortado::jni;  // NOLINT: a function body, not a header
  JNIEnv* env = nullptr;
  if (vm->GetEnv(reinterpret_cast<void**>(&env), kJniVersion) != JNI_OK) return JNI_ERR;
#if CORTADO_WITH_UCX
  // The JVM faults on purpose (null checks, safepoints): UCX's handlers must not catch that.
  cortado::comm::LeaveErrorSignalsToTheRuntime();
#endif
  for (int i = 0; i < kNumClasses; ++i) {
    jclass local = env->FindClass(kClassNames[i]);
    if (local == nullptr) {
      env->ExceptionClear();
      CORTADO_LOG_ERROR("Cortado JNI: class {} not found: is the Cortado jar on the class path?",
                        kClassNames[i]);
      ReleaseClasses(env);
      return JNI_ERR;
    }
    g_classes[i] = static_cast<jclass>(env->NewGlobalRef(local));
    env->DeleteLocalRef(local);
    if (g_classes[i] == nullptr) {
      env->ExceptionClear();
      ReleaseClasses(env);
      return JNI_ERR;
    }
  }
  return kJniVersion;
}

extern "C" JNIEXPORT void JNICALL JNI_OnUnload(JavaVM* vm, void* /*reserved*/) {
  JNIEnv* env = nullptr;
  if (vm->GetEnv(reinterpret_cast<void**>(&env), cortado::jni::kJniVersion) != JNI_OK) return;
  cortado::jni::ReleaseClasses(env);
}
