// SPDX-License-Identifier: Apache-2.0
// Natives of io.cortado.jni.NativeNet: a Net with its own Context, behind a jlong handle.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/error.hpp"
#include "data/batch_feed.hpp"
#include "io/proto_io.hpp"
#include "io/upgrade.hpp"
#include "io_cortado_jni_NativeNet.h"
#include "jni/jni_util.hpp"
#include "net/net.hpp"
#include "net/net_options.hpp"
#include "parallel/session_info.hpp"
#include "proto/caffe.pb.h"

namespace cortado::jni {
namespace {

// What a NativeNet handle owns: the net and the context it runs in (declared first, so it is
// destroyed last).
struct NetHandle {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Net> net;
};

Net& GetNet(jlong handle) { return *FromHandle<NetHandle>(handle, "NativeNet").net; }

// The net's feeds by phase-qualified name ("TEST/data").
std::vector<NamedFeed> Feeds(const Net& net) {
  std::vector<NamedFeed> feeds;
  AppendFeeds(net, &feeds);
  return feeds;
}

Device DeviceFor(jint device) {
  if (device < -1) CORTADO_THROW(kInvalidArgument, "device must be -1 (CPU) or a CUDA ordinal");
  return device == -1 ? Device::Cpu() : Device::Cuda(device);
}

}  // namespace
}  // namespace cortado::jni

using cortado::Net;
namespace jni = cortado::jni;

extern "C" {

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeNet_create(JNIEnv* env, jclass, jstring prototxt,
                                                             jstring source, jint phase,
                                                             jint device, jlong seed) {
  return jni::Guard(env, jlong{0}, [&] {
    const std::string name = jni::ToStdString(env, source, "source");
    caffe::NetParameter param;
    cortado::io::ReadProtoFromTextString(jni::ToStdString(env, prototxt, "prototxt"), name, &param);
    cortado::io::UpgradeNetAsNeeded(name, &param);
    if (phase != caffe::TRAIN && phase != caffe::TEST) {
      CORTADO_THROW(kInvalidArgument, "{}: phase must be 0 (TRAIN) or 1 (TEST), not {}", name,
                    phase);
    }
    param.mutable_state()->set_phase(static_cast<caffe::Phase>(phase));
    auto handle = std::make_unique<jni::NetHandle>();
    handle->ctx = std::make_unique<cortado::Context>(jni::DeviceFor(device), seed);
    cortado::WithContext(name, [&] {
      handle->net =
          std::make_unique<Net>(param, handle->ctx.get(), cortado::NetOptionsFromEnvironment());
    });
    return jni::ToHandle(std::move(handle));
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeNet_dispose(JNIEnv* env, jclass, jlong handle) {
  jni::Guard(env, [&] { jni::DisposeHandle<jni::NetHandle>(handle); });
}

JNIEXPORT jfloat JNICALL Java_io_cortado_jni_NativeNet_forward(JNIEnv* env, jclass, jlong handle) {
  return jni::Guard(env, jfloat{0}, [&] { return jni::GetNet(handle).Forward(); });
}

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeNet_forwardOnly(JNIEnv* env, jclass, jlong handle,
                                                                  jobjectArray keep) {
  return jni::Guard(env, jlong{0}, [&] {
    Net& net = jni::GetNet(handle);
    const std::vector<std::string> names =
        keep == nullptr ? std::vector<std::string>() : jni::ToStdStrings(env, keep, "keep");
    // Checked before anything changes: a bad name leaves the net as it was.
    for (const auto& name : names) net.blob_by_name(name);
    net.SetForwardOnly();
    if (!net.options().share_buffers) return jlong{0};
    return static_cast<jlong>(net.ShareDataBuffers(names));
  });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeNet_blobNames(JNIEnv* env, jclass,
                                                                       jlong handle) {
  return jni::Guard(env, jobjectArray{nullptr},
                    [&] { return jni::NewStringArray(env, jni::GetNet(handle).blob_names()); });
}

JNIEXPORT jintArray JNICALL Java_io_cortado_jni_NativeNet_blobShape(JNIEnv* env, jclass,
                                                                    jlong handle, jstring name) {
  return jni::Guard(env, jintArray{nullptr}, [&] {
    const Net& net = jni::GetNet(handle);
    return jni::NewIntArray(env, net.blob_by_name(jni::ToStdString(env, name, "name"))->shape());
  });
}

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeNet_copyBlobData(JNIEnv* env, jclass,
                                                                   jlong handle, jstring name,
                                                                   jobject buffer) {
  return jni::Guard(env, jlong{0}, [&] {
    const Net& net = jni::GetNet(handle);
    const std::string blob_name = jni::ToStdString(env, name, "name");
    const cortado::Tensor& blob = *net.blob_by_name(blob_name);
    const jni::DirectBuffer out = jni::GetDirectBuffer(env, buffer, "buffer");
    const int64_t bytes = int64_t{blob.count()} * static_cast<int64_t>(sizeof(float));
    if (out.capacity < bytes) {
      CORTADO_THROW(kInvalidArgument,
                    "net '{}': blob '{}' of shape {} needs {} bytes, the buffer holds {}",
                    net.name(), blob_name, blob.ShapeString(), bytes, out.capacity);
    }
    if (bytes > 0) std::memcpy(out.data, blob.cpu_data(), static_cast<size_t>(bytes));
    return static_cast<jlong>(blob.count());
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeNet_setBlobData(JNIEnv* env, jclass, jlong handle,
                                                                 jstring name, jintArray shape,
                                                                 jobject buffer) {
  jni::Guard(env, [&] {
    Net& net = jni::GetNet(handle);
    const std::string blob_name = jni::ToStdString(env, name, "name");
    cortado::Tensor& blob = *net.blob_by_name(blob_name);
    const jni::DirectBuffer in = jni::GetDirectBuffer(env, buffer, "buffer");
    if (shape != nullptr) {
      jni::ArrayElements<jintArray> dims(env, shape, "shape");
      const std::vector<int> new_shape(dims.begin(), dims.end());
      if (new_shape != blob.shape()) {
        blob.Reshape(new_shape);
        net.Reshape();
      }
    }
    const int64_t bytes = int64_t{blob.count()} * static_cast<int64_t>(sizeof(float));
    if (in.capacity < bytes) {
      CORTADO_THROW(kInvalidArgument,
                    "net '{}': blob '{}' of shape {} needs {} bytes, the buffer holds {}",
                    net.name(), blob_name, blob.ShapeString(), bytes, in.capacity);
    }
    if (bytes > 0) std::memcpy(blob.mutable_cpu_data(), in.data, static_cast<size_t>(bytes));
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeNet_loadWeights(JNIEnv* env, jclass, jlong handle,
                                                                 jbyteArray bytes, jstring source) {
  jni::Guard(env, [&] {
    Net& net = jni::GetNet(handle);
    const std::string name = jni::ToStdString(env, source, "source");
    caffe::NetParameter trained;
    jni::ParseBinaryProto(env, bytes, name, &trained);
    cortado::io::UpgradeNetAsNeeded(name, &trained);
    net.CopyTrainedLayersFrom(trained);
  });
}

JNIEXPORT jbyteArray JNICALL Java_io_cortado_jni_NativeNet_saveWeights(JNIEnv* env, jclass,
                                                                       jlong handle) {
  return jni::Guard(env, jbyteArray{nullptr}, [&] {
    caffe::NetParameter param;
    jni::GetNet(handle).ToProto(&param, /*write_diff=*/false);
    return jni::SerializeToByteArray(env, param);
  });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeNet_feedLayers(JNIEnv* env, jclass,
                                                                        jlong handle) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    return jni::NewStringArray(env, cortado::FeedNames(jni::Feeds(jni::GetNet(handle))));
  });
}

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeNet_feed(JNIEnv* env, jclass, jlong handle,
                                                           jstring layer) {
  return jni::Guard(env, jlong{0}, [&] {
    std::shared_ptr<cortado::BatchFeed> feed = cortado::FindFeed(
        jni::Feeds(jni::GetNet(handle)), jni::ToStdString(env, layer, "layer"), "the net");
    return jni::ToHandle(std::make_unique<jni::FeedHandle>(jni::FeedHandle{std::move(feed)}));
  });
}

}  // extern "C"
