// SPDX-License-Identifier: Apache-2.0
// Natives of io.cortado.jni.NativeFeed: pushing whole batches into one feed layer's queue
// (cpp/data/batch_feed.hpp) through a FeedHandle that NativeTrainer.feed or NativeNet.feed made.
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/batch_feed.hpp"
#include "io_cortado_jni_NativeFeed.h"
#include "jni/jni_util.hpp"

namespace cortado::jni {
namespace {

BatchFeed& GetFeed(jlong handle) { return *FromHandle<FeedHandle>(handle, "NativeFeed").feed; }

// Local references, dropped when this goes out of scope.
class LocalRefs {
 public:
  explicit LocalRefs(JNIEnv* env) : env_(env) {}
  ~LocalRefs() {
    for (jobject ref : refs_) {
      if (ref != nullptr) env_->DeleteLocalRef(ref);
    }
  }
  LocalRefs(const LocalRefs&) = delete;
  LocalRefs& operator=(const LocalRefs&) = delete;

  jobject Add(jobject ref) {
    refs_.push_back(ref);
    return ref;
  }

 private:
  JNIEnv* env_;
  std::vector<jobject> refs_;
};

}  // namespace
}  // namespace cortado::jni

namespace jni = cortado::jni;

extern "C" {

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeFeed_push(JNIEnv* env, jclass, jlong handle,
                                                           jobjectArray tops) {
  jni::Guard(env, [&] {
    cortado::BatchFeed& feed = jni::GetFeed(handle);
    if (tops == nullptr) CORTADO_THROW(kInvalidArgument, "{}: tops is null", feed.owner());
    const jsize n = env->GetArrayLength(tops);
    // The local references keep the buffers (and so their memory) alive during the push.
    jni::LocalRefs refs(env);
    std::vector<const float*> data;
    std::vector<size_t> counts;
    for (jsize i = 0; i < n; ++i) {
      jobject top = refs.Add(env->GetObjectArrayElement(tops, i));
      jni::CheckJavaException(env);
      const std::string what = "tops[" + std::to_string(i) + "]";
      const jni::DirectBuffer buffer = jni::GetDirectBuffer(env, top, what.c_str());
      if (buffer.capacity % static_cast<int64_t>(sizeof(float)) != 0) {
        CORTADO_THROW(kInvalidArgument, "{}: {} holds {} bytes, not a whole number of floats",
                      feed.owner(), what, buffer.capacity);
      }
      data.push_back(static_cast<const float*>(buffer.data));
      counts.push_back(static_cast<size_t>(buffer.capacity) / sizeof(float));
    }
    feed.Push(data, counts);
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeFeed_close(JNIEnv* env, jclass, jlong handle) {
  jni::Guard(env, [&] { jni::GetFeed(handle).Close(); });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeFeed_abort(JNIEnv* env, jclass, jlong handle,
                                                            jstring reason) {
  jni::Guard(env, [&] { jni::GetFeed(handle).Abort(jni::ToStdString(env, reason, "reason")); });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeFeed_topNames(JNIEnv* env, jclass,
                                                                       jlong handle) {
  return jni::Guard(env, jobjectArray{nullptr},
                    [&] { return jni::NewStringArray(env, jni::GetFeed(handle).top_names()); });
}

JNIEXPORT jintArray JNICALL Java_io_cortado_jni_NativeFeed_topShape(JNIEnv* env, jclass,
                                                                    jlong handle, jint top) {
  return jni::Guard(env, jintArray{nullptr}, [&] {
    const cortado::BatchFeed& feed = jni::GetFeed(handle);
    const auto& shapes = feed.shapes();
    if (top < 0 || static_cast<size_t>(top) >= shapes.size()) {
      CORTADO_THROW(kInvalidArgument, "{}: top index {} out of range (it has {} tops)",
                    feed.owner(), top, shapes.size());
    }
    return jni::NewIntArray(env, shapes[static_cast<size_t>(top)]);
  });
}

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeFeed_pushed(JNIEnv* env, jclass, jlong handle) {
  return jni::Guard(env, jlong{0},
                    [&] { return static_cast<jlong>(jni::GetFeed(handle).pushed()); });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeFeed_dispose(JNIEnv* env, jclass, jlong handle) {
  jni::Guard(env, [&] { jni::DisposeHandle<jni::FeedHandle>(handle); });
}

}  // extern "C"
