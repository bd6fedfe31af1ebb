// SPDX-License-Identifier: Apache-2.0
// Natives of io.cortado.jni.NativeLib: version, devices, prototxt validation.
#include <string>

#include "core/config.hpp"
#include "core/device_info.hpp"
#include "core/error.hpp"
#include "io/proto_io.hpp"
#include "io/upgrade.hpp"
#include "io_cortado_jni_NativeLib.h"
#include "jni/jni_util.hpp"
#include "layers/layer.hpp"
#include "proto/caffe.pb.h"

namespace cortado::jni {
namespace {

// Every layer type must be registered (what building the net would find first, without opening
// data sources or allocating anything).
void CheckLayerTypes(const caffe::NetParameter& net, const std::string& source) {
  const LayerRegistry& registry = LayerRegistry::Get();
  for (const auto& layer : net.layer()) {
    if (!registry.Has(layer.type())) {
      CORTADO_THROW(kInvalidArgument, "{}: layer '{}': unknown layer type '{}' (known: {})", source,
                    layer.name(), layer.type(), fmt::join(registry.Types(), ", "));
    }
  }
}

}  // namespace
}  // namespace cortado::jni

namespace jni = cortado::jni;

extern "C" {

JNIEXPORT jstring JNICALL Java_io_cortado_jni_NativeLib_version(JNIEnv* env, jclass) {
  return jni::Guard(env, jstring{nullptr}, [&] { return jni::NewString(env, CORTADO_VERSION); });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeLib_deviceQuery(JNIEnv* env, jclass) {
  return jni::Guard(env, jobjectArray{nullptr},
                    [&] { return jni::NewStringArray(env, cortado::DescribeDevices()); });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeLib_validateNet(JNIEnv* env, jclass,
                                                                 jstring prototxt, jstring source) {
  jni::Guard(env, [&] {
    const std::string name = jni::ToStdString(env, source, "source");
    caffe::NetParameter param;
    cortado::io::ReadProtoFromTextString(jni::ToStdString(env, prototxt, "prototxt"), name, &param);
    cortado::io::UpgradeNetAsNeeded(name, &param);
    jni::CheckLayerTypes(param, name);
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeLib_validateSolver(JNIEnv* env, jclass,
                                                                    jstring prototxt,
                                                                    jstring source) {
  jni::Guard(env, [&] {
    const std::string name = jni::ToStdString(env, source, "source");
    caffe::SolverParameter param;
    cortado::io::ReadProtoFromTextString(jni::ToStdString(env, prototxt, "prototxt"), name, &param);
    cortado::io::UpgradeSolverAsNeeded(name, &param);
    if (param.has_net_param()) jni::CheckLayerTypes(param.net_param(), name);
    if (param.has_train_net_param()) jni::CheckLayerTypes(param.train_net_param(), name);
    for (const auto& net : param.test_net_param()) jni::CheckLayerTypes(net, name);
  });
}

}  // extern "C"
