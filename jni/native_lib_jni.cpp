// SPDX-License-Identifier: Apache-2.0
// Natives of io.cortado.jni.NativeLib: version, devices, prototxt validation, what the Spark
// driver needs to know of a solver and a net (io.cortado.jni.SolverInfo, DataLayerInfo), and
// a trained net's ONNX export.
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/rdma_devices.hpp"
#include "core/config.hpp"
#include "core/context.hpp"
#include "core/device_info.hpp"
#include "core/error.hpp"
#include "io/hdf5_io.hpp"
#include "io/proto_io.hpp"
#include "io/upgrade.hpp"
#include "io_cortado_jni_NativeLib.h"
#include "jni/jni_util.hpp"
#include "net/net.hpp"
#if CORTADO_WITH_ONNX
#include "onnx/onnx_export.hpp"
#endif
#include "parallel/session_info.hpp"
#include "parallel/trainer.hpp"
#include "plot/training_plot.hpp"
#include "proto/caffe.pb.h"
#include "solvers/solver.hpp"

namespace cortado::jni {
namespace {

caffe::SolverParameter ParseSolver(JNIEnv* env, jstring prototxt, const std::string& name) {
  caffe::SolverParameter param;
  io::ReadProtoFromTextString(ToStdString(env, prototxt, "prototxt"), name, &param);
  io::UpgradeSolverAsNeeded(name, &param);
  if (param.has_net_param()) CheckLayerTypes(param.net_param(), name);
  if (param.has_train_net_param()) CheckLayerTypes(param.train_net_param(), name);
  for (const auto& net : param.test_net_param()) CheckLayerTypes(net, name);
  return param;
}

// A net prototxt, parsed and upgraded (every phase's layers), once `phase` is checked to be 0
// (TRAIN) or 1 (TEST); errors name `source`, which goes to *name.
caffe::NetParameter WholeNet(JNIEnv* env, jstring prototxt, jstring source, jint phase,
                             std::string* name) {
  *name = ToStdString(env, source, "source");
  caffe::NetParameter param;
  io::ReadProtoFromTextString(ToStdString(env, prototxt, "prototxt"), *name, &param);
  io::UpgradeNetAsNeeded(*name, &param);
  if (phase != caffe::TRAIN && phase != caffe::TEST) {
    CORTADO_THROW(kInvalidArgument, "{}: phase must be 0 (TRAIN) or 1 (TEST), not {}", *name,
                  phase);
  }
  return param;
}

// The `phase` net of a net prototxt, validated.
caffe::NetParameter PhaseNet(JNIEnv* env, jstring prototxt, jstring source, jint phase,
                             std::string* name) {
  caffe::NetParameter param = WholeNet(env, prototxt, source, phase, name);
  CheckLayerTypes(param, *name);
  return NetForPhase(param, static_cast<caffe::Phase>(phase));
}

// A new local reference to `name` (a class the shim defines), or JavaExceptionPending.
jclass FindClass(JNIEnv* env, const char* name) {
  jclass cls = env->FindClass(name);
  CheckJavaException(env);
  if (cls == nullptr) CORTADO_THROW(kInternal, "class {} not found", name);
  return cls;
}

jobject NewDataLayerInfo(JNIEnv* env, jclass cls, jmethodID init, const DataLayerInfo& info) {
  jobjectArray tops = NewStringArray(env, info.tops);
  jobjectArray columns = NewStringArray(env, info.columns);
  jobjectArray types = NewStringArray(env, info.top_types);
  jbooleanArray transposed = env->NewBooleanArray(static_cast<jsize>(info.transposed.size()));
  CheckJavaException(env);
  for (size_t i = 0; i < info.transposed.size(); ++i) {
    const jboolean value = info.transposed[i] ? JNI_TRUE : JNI_FALSE;
    env->SetBooleanArrayRegion(transposed, static_cast<jsize>(i), 1, &value);
  }
  jclass int_array = FindClass(env, "[I");
  jobjectArray shapes =
      env->NewObjectArray(static_cast<jsize>(info.sample_shapes.size()), int_array, nullptr);
  env->DeleteLocalRef(int_array);
  CheckJavaException(env);
  for (size_t i = 0; i < info.sample_shapes.size(); ++i) {
    jintArray shape = NewIntArray(env, info.sample_shapes[i]);
    env->SetObjectArrayElement(shapes, static_cast<jsize>(i), shape);
    env->DeleteLocalRef(shape);
  }
  jstring name = NewString(env, info.name);
  jstring type = NewString(env, info.type);
  jstring source_class = NewString(env, info.source_class);
  jstring source = NewString(env, info.source);
  jstring format = NewString(env, info.dataframe_format);
  jobjectArray select = NewStringArray(env, info.column_select);
  jobject object = env->NewObject(
      cls, init, name, type, source_class, info.feed ? JNI_TRUE : JNI_FALSE, source, format, tops,
      columns, types, transposed, shapes, static_cast<jint>(info.batch_size), select,
      info.image_encoded ? JNI_TRUE : JNI_FALSE, static_cast<jint>(info.crop_size));
  for (jobject ref :
       {static_cast<jobject>(name), static_cast<jobject>(type), static_cast<jobject>(source_class),
        static_cast<jobject>(source), static_cast<jobject>(format), static_cast<jobject>(tops),
        static_cast<jobject>(columns), static_cast<jobject>(types),
        static_cast<jobject>(transposed), static_cast<jobject>(shapes),
        static_cast<jobject>(select)}) {
    env->DeleteLocalRef(ref);
  }
  CheckJavaException(env);
  return object;
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

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeLib_rdmaDevices(JNIEnv* env, jclass) {
  return jni::Guard(env, jobjectArray{nullptr},
                    [&] { return jni::NewStringArray(env, cortado::comm::ActiveRdmaPorts()); });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeLib_validateNet(JNIEnv* env, jclass,
                                                                 jstring prototxt, jstring source) {
  jni::Guard(env, [&] {
    const std::string name = jni::ToStdString(env, source, "source");
    caffe::NetParameter param;
    cortado::io::ReadProtoFromTextString(jni::ToStdString(env, prototxt, "prototxt"), name, &param);
    cortado::io::UpgradeNetAsNeeded(name, &param);
    cortado::io::CheckNetHasLayers(param, name);
    cortado::CheckLayerTypes(param, name);
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
    if (param.has_net_param()) cortado::CheckLayerTypes(param.net_param(), name);
    if (param.has_train_net_param()) cortado::CheckLayerTypes(param.train_net_param(), name);
    for (const auto& net : param.test_net_param()) cortado::CheckLayerTypes(net, name);
  });
}

JNIEXPORT jobject JNICALL Java_io_cortado_jni_NativeLib_solverInfo(JNIEnv* env, jclass,
                                                                   jstring prototxt,
                                                                   jstring source) {
  return jni::Guard(env, jobject{nullptr}, [&] {
    const std::string name = jni::ToStdString(env, source, "source");
    const caffe::SolverParameter param = jni::ParseSolver(env, prototxt, name);
    std::string net_file = param.has_net() ? param.net() : param.train_net();
    std::string net_text;
    const caffe::NetParameter* embedded = param.has_net_param()         ? &param.net_param()
                                          : param.has_train_net_param() ? &param.train_net_param()
                                                                        : nullptr;
    if (embedded != nullptr) {
      net_file.clear();
      if (!google::protobuf::TextFormat::PrintToString(*embedded, &net_text)) {
        CORTADO_THROW(kInternal, "{}: cannot print the embedded net", name);
      }
    } else if (net_file.empty()) {
      CORTADO_THROW(kInvalidArgument,
                    "{}: the solver names no net (net, net_param, train_net or train_net_param)",
                    name);
    }
    const cortado::Device device = cortado::SolverDevice(param);
    jclass cls = jni::FindClass(env, "io/cortado/jni/SolverInfo");
    jmethodID init = env->GetMethodID(
        cls, "<init>",
        "(Ljava/lang/String;Ljava/lang/String;Ljava/lang/String;III[IZIZLjava/lang/String;IZZIF)V");
    jni::CheckJavaException(env);
    std::vector<int> test_iter(param.test_iter().begin(), param.test_iter().end());
    jobject info = env->NewObject(
        cls, init, jni::NewString(env, net_file), jni::NewString(env, net_text),
        jni::NewString(env, param.type()), param.max_iter(), param.display(), param.test_interval(),
        jni::NewIntArray(env, test_iter), param.test_initialization() ? JNI_TRUE : JNI_FALSE,
        param.snapshot(), param.snapshot_after_train() ? JNI_TRUE : JNI_FALSE,
        jni::NewString(env, param.snapshot_prefix()), device.is_cuda() ? device.id : -1,
        param.solver_mode() == caffe::SolverParameter::GPU ? JNI_TRUE : JNI_FALSE,
        param.snapshot_format() == caffe::SolverParameter::HDF5 ? JNI_TRUE : JNI_FALSE,
        static_cast<jint>(param.iter_size()), param.base_lr());
    env->DeleteLocalRef(cls);
    jni::CheckJavaException(env);
    return info;
  });
}

JNIEXPORT jbyteArray JNICALL Java_io_cortado_jni_NativeLib_solverParameter(JNIEnv* env, jclass,
                                                                           jstring prototxt,
                                                                           jstring source) {
  return jni::Guard(env, jbyteArray{nullptr}, [&] {
    return jni::NewByteArray(
        env, jni::ParseSolver(env, prototxt, jni::ToStdString(env, source, "source"))
                 .SerializeAsString());
  });
}

JNIEXPORT jbyteArray JNICALL Java_io_cortado_jni_NativeLib_netParameter(JNIEnv* env, jclass,
                                                                        jstring prototxt,
                                                                        jstring source) {
  return jni::Guard(env, jbyteArray{nullptr}, [&] {
    std::string name;
    caffe::NetParameter param = jni::WholeNet(env, prototxt, source, caffe::TRAIN, &name);
    cortado::CheckLayerTypes(param, name);
    return jni::NewByteArray(env, param.SerializeAsString());
  });
}

JNIEXPORT jstring JNICALL Java_io_cortado_jni_NativeLib_snapshotPrefix(JNIEnv* env, jclass,
                                                                       jstring solver_file,
                                                                       jstring prefix,
                                                                       jboolean is_directory) {
  return jni::Guard(env, jstring{nullptr}, [&] {
    return jni::NewString(
        env, cortado::SnapshotPrefixFor(jni::ToStdString(env, solver_file, "solverFile"),
                                        jni::ToStdString(env, prefix, "prefix"), is_directory));
  });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeLib_dataLayers(JNIEnv* env, jclass,
                                                                        jstring prototxt,
                                                                        jstring source,
                                                                        jint phase) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    std::string name;
    const caffe::NetParameter net = jni::PhaseNet(env, prototxt, source, phase, &name);
    const std::vector<cortado::DataLayerInfo> layers = cortado::DescribeDataLayers(net, name);
    jclass cls = jni::FindClass(env, "io/cortado/jni/DataLayerInfo");
    jmethodID init = env->GetMethodID(
        cls, "<init>",
        "(Ljava/lang/String;Ljava/lang/String;Ljava/lang/String;ZLjava/lang/String;"
        "Ljava/lang/String;[Ljava/lang/String;[Ljava/lang/String;[Ljava/lang/String;[Z[[II"
        "[Ljava/lang/String;ZI)V");
    jni::CheckJavaException(env);
    jobjectArray result = env->NewObjectArray(static_cast<jsize>(layers.size()), cls, nullptr);
    jni::CheckJavaException(env);
    for (size_t i = 0; i < layers.size(); ++i) {
      jobject info = jni::NewDataLayerInfo(env, cls, init, layers[i]);
      env->SetObjectArrayElement(result, static_cast<jsize>(i), info);
      env->DeleteLocalRef(info);
    }
    env->DeleteLocalRef(cls);
    return result;
  });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeLib_outputBlobs(JNIEnv* env, jclass,
                                                                         jstring prototxt,
                                                                         jstring source,
                                                                         jint phase) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    std::string name;
    return jni::NewStringArray(
        env, cortado::OutputBlobNames(jni::PhaseNet(env, prototxt, source, phase, &name)));
  });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeLib_blobNames(JNIEnv* env, jclass,
                                                                       jstring prototxt,
                                                                       jstring source, jint phase) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    std::string name;
    return jni::NewStringArray(
        env, cortado::BlobNames(jni::PhaseNet(env, prototxt, source, phase, &name)));
  });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeLib_layers(JNIEnv* env, jclass,
                                                                    jstring prototxt,
                                                                    jstring source, jint phase) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    std::string name;
    const caffe::NetParameter net = jni::PhaseNet(env, prototxt, source, phase, &name);
    // One line per layer: name, type, the count of bottoms, the bottoms, the count of tops, the
    // tops, separated by tabs (which layer and blob names do not hold).
    std::vector<std::string> lines;
    lines.reserve(static_cast<size_t>(net.layer_size()));
    for (const auto& layer : net.layer()) {
      lines.push_back(fmt::format("{}\t{}\t{}", layer.name(), layer.type(), layer.bottom_size()));
      for (const auto& bottom : layer.bottom()) lines.back() += "\t" + bottom;
      lines.back() += fmt::format("\t{}", layer.top_size());
      for (const auto& top : layer.top()) lines.back() += "\t" + top;
    }
    return jni::NewStringArray(env, lines);
  });
}

JNIEXPORT jstring JNICALL Java_io_cortado_jni_NativeLib_mergeSolver(JNIEnv* env, jclass,
                                                                    jstring prototxt,
                                                                    jstring source,
                                                                    jstring overrides,
                                                                    jstring overrides_source) {
  return jni::Guard(env, jstring{nullptr}, [&] {
    const std::string name = jni::ToStdString(env, source, "source");
    caffe::SolverParameter param = jni::ParseSolver(env, prototxt, name);
    caffe::SolverParameter changes;
    cortado::io::ReadProtoFromTextString(jni::ToStdString(env, overrides, "overrides"),
                                         jni::ToStdString(env, overrides_source, "overridesSource"),
                                         &changes);
    // A net given in the overrides, however given, replaces the solver's (which names its net
    // in one of four fields).
    if (changes.has_net() || changes.has_net_param() || changes.has_train_net() ||
        changes.has_train_net_param()) {
      param.clear_net();
      param.clear_net_param();
      param.clear_train_net();
      param.clear_train_net_param();
    }
    // A repeated field given in the overrides replaces the solver's list (MergeFrom would
    // append to it: `stepvalue: 100` would add a step, not set the steps).
    std::vector<const google::protobuf::FieldDescriptor*> fields;
    changes.GetReflection()->ListFields(changes, &fields);
    for (const auto* field : fields) {
      if (field->is_repeated()) param.GetReflection()->ClearField(&param, field);
    }
    param.MergeFrom(changes);
    std::string text;
    if (!google::protobuf::TextFormat::PrintToString(param, &text)) {
      CORTADO_THROW(kInternal, "{}: cannot print the solver", name);
    }
    return jni::NewString(env, text);
  });
}

JNIEXPORT jstring JNICALL Java_io_cortado_jni_NativeLib_withFeedBatchSize(
    JNIEnv* env, jclass, jstring prototxt, jstring source, jstring layer, jint phase, jint batch) {
  return jni::Guard(env, jstring{nullptr}, [&] {
    std::string name;
    const caffe::NetParameter param = jni::WholeNet(env, prototxt, source, phase, &name);
    const caffe::NetParameter changed =
        cortado::WithFeedBatchSize(param, static_cast<caffe::Phase>(phase),
                                   jni::ToStdString(env, layer, "layer"), batch, name);
    std::string text;
    if (!google::protobuf::TextFormat::PrintToString(changed, &text)) {
      CORTADO_THROW(kInternal, "{}: cannot print the net", name);
    }
    return jni::NewString(env, text);
  });
}

}  // extern "C"

namespace {

// A file in the temporary directory, removed when it goes out of scope.
class TempFile {
 public:
  explicit TempFile(const char* suffix) {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir != nullptr && *dir != 0 ? dir : "/tmp") +
                          "/cortado-snapshot-XXXXXX" + suffix;
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back(0);
    const int fd = ::mkstemps(name.data(), static_cast<int>(std::strlen(suffix)));
    if (fd < 0) {
      CORTADO_THROW(kIo, "cannot create a temporary file {}: {}", pattern, std::strerror(errno));
    }
    ::close(fd);
    path_ = name.data();
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

extern "C" {

JNIEXPORT jbyteArray JNICALL Java_io_cortado_jni_NativeLib_snapshotToHdf5(
    JNIEnv* env, jclass, jbyteArray bytes, jboolean state, jstring learned_net, jstring source) {
  return jni::Guard(env, jbyteArray{nullptr}, [&] {
    const std::string name = jni::ToStdString(env, source, "source");
    if (!cortado::io::Hdf5Available()) {
      CORTADO_THROW(kUnimplemented, "{}: snapshot_format HDF5 needs a build with HDF5", name);
    }
    TempFile file(".h5");
    if (state) {
      caffe::SolverState proto;
      jni::ParseBinaryProto(env, bytes, name, &proto);
      if (learned_net != nullptr) {
        proto.set_learned_net(jni::ToStdString(env, learned_net, "learnedNet"));
      }
      cortado::io::WriteSolverStateHdf5(proto, file.path());
    } else {
      caffe::NetParameter proto;
      jni::ParseBinaryProto(env, bytes, name, &proto);
      cortado::io::WriteNetParameterHdf5(proto, file.path());
    }
    return jni::NewByteArray(env, cortado::io::ReadFile(file.path()));
  });
}

JNIEXPORT jbyteArray JNICALL Java_io_cortado_jni_NativeLib_snapshotFromHdf5(JNIEnv* env, jclass,
                                                                            jbyteArray bytes,
                                                                            jboolean state,
                                                                            jstring source) {
  return jni::Guard(env, jbyteArray{nullptr}, [&] {
    const std::string name = jni::ToStdString(env, source, "source");
    if (!cortado::io::Hdf5Available()) {
      CORTADO_THROW(kUnimplemented, "{}: reading an HDF5 snapshot needs a build with HDF5", name);
    }
    TempFile file(".h5");
    cortado::io::WriteFileAtomic(file.path(), jni::ToBytes(env, bytes, "bytes"));
    try {
      if (state) {
        return jni::SerializeToByteArray(env, cortado::io::ReadSolverStateHdf5(file.path()));
      }
      return jni::SerializeToByteArray(env, cortado::io::ReadNetParameterHdf5(file.path()));
    } catch (const cortado::Error& e) {
      // The messages name the temporary file: name the snapshot instead.
      std::string message = e.what();
      for (size_t at = message.find(file.path()); at != std::string::npos;
           at = message.find(file.path(), at + name.size())) {
        message.replace(at, file.path().size(), name);
      }
      throw cortado::Error(e.code(), message, e.file(), e.line());
    }
  });
}

}  // extern "C"

extern "C" {

JNIEXPORT jbyteArray JNICALL Java_io_cortado_jni_NativeLib_plotLog(JNIEnv* env, jclass,
                                                                   jstring log_text, jstring source,
                                                                   jint width, jint height) {
  return jni::Guard(env, jbyteArray{nullptr}, [&] {
    cortado::plot::PlotOptions options;
    options.width = width;
    options.height = height;
    return jni::NewByteArray(
        env, cortado::plot::PlotTrainingLog(jni::ToStdString(env, log_text, "logText"),
                                            jni::ToStdString(env, source, "source"), options));
  });
}

}  // extern "C"

extern "C" {

JNIEXPORT jbyteArray JNICALL
Java_io_cortado_jni_NativeLib_exportOnnx(JNIEnv* env, jclass, jstring prototxt, jstring source,
                                         jbyteArray weights, jint opset, jboolean dynamic_batch) {
  return jni::Guard(env, jbyteArray{nullptr}, [&]() -> jbyteArray {
    std::string name;
    caffe::NetParameter param = jni::WholeNet(env, prototxt, source, caffe::TEST, &name);
#if CORTADO_WITH_ONNX
    cortado::io::CheckNetHasLayers(param, name);
    cortado::CheckLayerTypes(param, name);
    param.mutable_state()->set_phase(caffe::TEST);
    // The context outlives the net, which runs in it.
    auto ctx = std::make_unique<cortado::Context>(cortado::Device::Cpu(), /*seed=*/1);
    std::unique_ptr<cortado::Net> net;
    cortado::WithContext(name, [&] {
      net = std::make_unique<cortado::Net>(param, ctx.get(), cortado::OnnxExportNetOptions());
    });
    if (weights != nullptr && env->GetArrayLength(weights) > 0) {
      const std::string weights_name = name + " weights";
      caffe::NetParameter trained;
      jni::ParseBinaryProto(env, weights, weights_name, &trained);
      cortado::io::UpgradeNetAsNeeded(weights_name, &trained);
      cortado::WithContext(weights_name, [&] { net->CopyTrainedLayersFrom(trained); });
    }
    cortado::OnnxExportOptions options;
    options.opset = opset;
    options.dynamic_batch = dynamic_batch == JNI_TRUE;
    const onnx::ModelProto model =
        cortado::WithContext(name, [&] { return cortado::ExportOnnx(*net, options); });
    // onnx.proto asks for protobuf's lite runtime: a MessageLite, serialised here.
    std::string bytes;
    if (!model.SerializeToString(&bytes)) {
      CORTADO_THROW(kInvalidArgument, "{}: cannot serialise the ONNX model (over 2 GiB?)", name);
    }
    return jni::NewByteArray(env, bytes);
#else
    (void)weights;
    (void)opset;
    (void)dynamic_batch;
    CORTADO_THROW(kUnimplemented,
                  "{}: ONNX export needs a build with ONNX (WITH_ONNX, libonnx-dev's onnx.proto)",
                  name);
#endif
  });
}

}  // extern "C"
