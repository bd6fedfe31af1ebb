// SPDX-License-Identifier: Apache-2.0
// Natives of io.cortado.jni.NativeLmdb: ranges of Datum records of an LMDB database decoded into
// direct buffers (cpp/data/datum_db.hpp), and IDX files converted to LMDB
// (cpp/data/idx_convert.hpp).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/datum_db.hpp"
#include "data/idx_convert.hpp"
#include "io_cortado_jni_NativeLmdb.h"
#include "jni/jni_util.hpp"

namespace cortado::jni {
namespace {

DatumDbReader& GetReader(jlong handle) { return FromHandle<DatumDbReader>(handle, "NativeLmdb"); }

// A direct buffer of at least `bytes` bytes.
void* BufferOfAtLeast(JNIEnv* env, jobject buffer, const char* what, int64_t bytes,
                      const DatumDbReader& reader) {
  const DirectBuffer b = GetDirectBuffer(env, buffer, what);
  if (b.capacity < bytes) {
    CORTADO_THROW(kInvalidArgument, "reading LMDB database '{}': {} holds {} bytes, needs {}",
                  reader.path(), what, b.capacity, bytes);
  }
  return b.data;
}

// Each key as its length (big-endian int32, as java.nio.ByteBuffer reads by default) and bytes.
std::string PackKeys(const std::vector<std::string>& keys) {
  std::string packed;
  for (const std::string& key : keys) {
    const auto n = static_cast<uint32_t>(key.size());
    const char length[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                            static_cast<char>(n >> 8), static_cast<char>(n)};
    packed.append(length, sizeof(length));
    packed.append(key);
  }
  return packed;
}

}  // namespace
}  // namespace cortado::jni

namespace jni = cortado::jni;

extern "C" {

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeLmdb_open(JNIEnv* env, jclass, jstring path,
                                                            jstring owner) {
  return jni::Guard(env, jlong{0}, [&] {
    return jni::ToHandle(std::make_unique<cortado::DatumDbReader>(
        jni::ToStdString(env, path, "path"), jni::ToStdString(env, owner, "owner")));
  });
}

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeLmdb_count(JNIEnv* env, jclass, jlong handle) {
  return jni::Guard(env, jlong{0},
                    [&] { return static_cast<jlong>(jni::GetReader(handle).size()); });
}

JNIEXPORT jintArray JNICALL Java_io_cortado_jni_NativeLmdb_shape(JNIEnv* env, jclass,
                                                                 jlong handle) {
  return jni::Guard(env, jintArray{nullptr},
                    [&] { return jni::NewIntArray(env, jni::GetReader(handle).shape()); });
}

JNIEXPORT jbyteArray JNICALL Java_io_cortado_jni_NativeLmdb_read(JNIEnv* env, jclass, jlong handle,
                                                                 jlong start, jint count,
                                                                 jobject data, jobject labels) {
  return jni::Guard(env, jbyteArray{nullptr}, [&] {
    cortado::DatumDbReader& reader = jni::GetReader(handle);
    if (count < 0) {
      CORTADO_THROW(kInvalidArgument, "reading LMDB database '{}': count {} is negative",
                    reader.path(), count);
    }
    const int64_t n = count;
    auto* values = static_cast<float*>(jni::BufferOfAtLeast(
        env, data, "data", n * reader.sample_size() * static_cast<int64_t>(sizeof(float)), reader));
    auto* ints = static_cast<int32_t*>(jni::BufferOfAtLeast(
        env, labels, "labels", n * static_cast<int64_t>(sizeof(int32_t)), reader));
    std::vector<std::string> keys;
    reader.Read(start, n, values, ints, &keys);
    return jni::NewByteArray(env, jni::PackKeys(keys));
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeLmdb_dispose(JNIEnv* env, jclass, jlong handle) {
  jni::Guard(env, [&] { jni::DisposeHandle<cortado::DatumDbReader>(handle); });
}

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeLmdb_convertIdx(JNIEnv* env, jclass,
                                                                  jstring images, jstring labels,
                                                                  jstring out) {
  return jni::Guard(env, jlong{0}, [&] {
    cortado::IdxConvertOptions options;
    options.images = jni::ToStdString(env, images, "images");
    options.labels = jni::ToStdString(env, labels, "labels");
    options.out = jni::ToStdString(env, out, "out");
    return static_cast<jlong>(cortado::ConvertIdx(options));
  });
}

}  // extern "C"
