// SPDX-License-Identifier: Apache-2.0
// Natives of io.cortado.jni.NativeSolver: a Solver with its own Context, behind a jlong handle.
//
// Snapshots cross JNI as bytes. The Solver writes and reads snapshot files only, so the handle
// owns a private temporary directory: snapshot() lets the solver write there and reads the two
// files back (naming the caller's model path as the state's learned_net); restore() writes the
// bytes there (pointing the state's learned_net at the model file) and lets the solver read them.
// The files are removed as soon as the call ends.
#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/error.hpp"
#include "core/logging.hpp"
#include "io/proto_io.hpp"
#include "io/upgrade.hpp"
#include "io_cortado_jni_NativeSolver.h"
#include "jni/jni_util.hpp"
#include "proto/caffe.pb.h"
#include "solvers/solver.hpp"

namespace fs = std::filesystem;

namespace cortado::jni {
namespace {

// A directory made with mkdtemp and removed with everything in it when this goes away.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cortado-solver-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      CORTADO_THROW(kIo, "cannot create a temporary directory like {}", pattern);
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
    if (ec) CORTADO_LOG_WARN("cannot remove {}: {}", path_.string(), ec.message());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Removes a file when it goes out of scope.
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

// Members in construction order: the solver is destroyed before its context and directory.
struct SolverHandle {
  std::unique_ptr<TempDir> dir;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Solver> solver;
};

SolverHandle& GetHandle(jlong handle) { return FromHandle<SolverHandle>(handle, "NativeSolver"); }
Solver& GetSolver(jlong handle) { return *GetHandle(handle).solver; }

}  // namespace
}  // namespace cortado::jni

namespace jni = cortado::jni;

extern "C" {

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeSolver_create(JNIEnv* env, jclass,
                                                                jstring solver_prototxt,
                                                                jstring solver_source,
                                                                jstring net_prototxt,
                                                                jstring net_source, jint device) {
  return jni::Guard(env, jlong{0}, [&] {
    const std::string solver_name = jni::ToStdString(env, solver_source, "solverSource");
    caffe::SolverParameter param;
    cortado::io::ReadProtoFromTextString(jni::ToStdString(env, solver_prototxt, "solverPrototxt"),
                                         solver_name, &param);
    cortado::io::UpgradeSolverAsNeeded(solver_name, &param);
    if (net_prototxt != nullptr) {
      const std::string net_name = jni::ToStdString(env, net_source, "netSource");
      caffe::NetParameter net;
      cortado::io::ReadProtoFromTextString(jni::ToStdString(env, net_prototxt, "netPrototxt"),
                                           net_name, &net);
      cortado::io::UpgradeNetAsNeeded(net_name, &net);
      param.clear_net();
      param.clear_train_net();
      param.clear_train_net_param();
      param.clear_test_net();
      param.clear_test_net_param();
      *param.mutable_net_param() = std::move(net);
    }
    if (device < -1) CORTADO_THROW(kInvalidArgument, "device must be -1 (CPU) or a CUDA ordinal");

    auto handle = std::make_unique<jni::SolverHandle>();
    handle->dir = std::make_unique<jni::TempDir>();
    // Snapshots are taken when the JVM asks, as bytes (see the file comment).
    param.set_snapshot(0);
    param.set_snapshot_after_train(false);
    param.set_snapshot_format(caffe::SolverParameter::BINARYPROTO);
    param.set_snapshot_prefix((handle->dir->path() / "snapshot").string());
    handle->ctx = std::make_unique<cortado::Context>(device == -1 ? cortado::Device::Cpu()
                                                                  : cortado::Device::Cuda(device));
    jni::WithSource(solver_name,
                    [&] { handle->solver = cortado::CreateSolver(param, handle->ctx.get()); });
    const cortado::Context* ctx = handle->ctx.get();
    const jlong h = jni::ToHandle(std::move(handle));
    jni::RegisterHandleContext(h, ctx);
    return h;
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeSolver_dispose(JNIEnv* env, jclass, jlong handle) {
  jni::Guard(env, [&] {
    jni::UnregisterHandleContext(handle);
    jni::DisposeHandle<jni::SolverHandle>(handle);
  });
}

JNIEXPORT jfloat JNICALL Java_io_cortado_jni_NativeSolver_step(JNIEnv* env, jclass, jlong handle,
                                                               jint iterations) {
  return jni::Guard(env, jfloat{0}, [&] {
    if (iterations < 0) CORTADO_THROW(kInvalidArgument, "step: {} iterations", iterations);
    cortado::Solver& solver = jni::GetSolver(handle);
    solver.Step(iterations);
    return solver.smoothed_loss();
  });
}

JNIEXPORT jint JNICALL Java_io_cortado_jni_NativeSolver_iter(JNIEnv* env, jclass, jlong handle) {
  return jni::Guard(env, jint{0}, [&] { return jni::GetSolver(handle).iter(); });
}

JNIEXPORT jfloat JNICALL Java_io_cortado_jni_NativeSolver_learningRate(JNIEnv* env, jclass,
                                                                       jlong handle) {
  return jni::Guard(env, jfloat{0}, [&] { return jni::GetSolver(handle).GetLearningRate(); });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeSolver_snapshot(JNIEnv* env, jclass,
                                                                         jlong handle,
                                                                         jstring learned_net) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    cortado::Solver& solver = jni::GetSolver(handle);
    const std::string learned_net_path = jni::ToStdString(env, learned_net, "learnedNet");
    const jni::RemoveOnExit model{solver.SnapshotFilename(".caffemodel")};
    const jni::RemoveOnExit state{solver.SnapshotFilename(".solverstate")};
    solver.Snapshot();
    // The state names the model where the caller will put it, not in our temporary directory.
    caffe::SolverState solver_state;
    cortado::io::ReadProtoFromBinaryFile(state.path, &solver_state);
    solver_state.set_learned_net(learned_net_path);
    std::string state_bytes;
    if (!solver_state.SerializeToString(&state_bytes)) {
      CORTADO_THROW(kInvalidArgument, "cannot serialise the solver state (over 2 GiB?)");
    }
    return jni::NewByteArrayArray(env, {cortado::io::ReadFile(model.path), state_bytes});
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeSolver_restore(JNIEnv* env, jclass, jlong handle,
                                                                jbyteArray model,
                                                                jbyteArray state) {
  jni::Guard(env, [&] {
    jni::SolverHandle& h = jni::GetHandle(handle);
    caffe::SolverState solver_state;
    jni::ParseBinaryProto(env, state, "the solver state bytes", &solver_state);
    const jni::RemoveOnExit model_file{(h.dir->path() / "restored.caffemodel").string()};
    const jni::RemoveOnExit state_file{(h.dir->path() / "restored.solverstate").string()};
    {
      jni::ArrayElements<jbyteArray> bytes(env, model, "model");
      cortado::io::WriteFileAtomic(
          model_file.path, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    }
    solver_state.set_learned_net(model_file.path);
    cortado::io::WriteProtoToBinaryFile(solver_state, state_file.path);
    h.solver->Restore(state_file.path);
  });
}

JNIEXPORT jfloatArray JNICALL Java_io_cortado_jni_NativeSolver_testAll(JNIEnv* env, jclass,
                                                                       jlong handle) {
  return jni::Guard(env, jfloatArray{nullptr}, [&] {
    cortado::Solver& solver = jni::GetSolver(handle);
    solver.TestAll();
    std::vector<float> values;
    for (const auto& scores : solver.test_scores()) {
      values.insert(values.end(), scores.begin(), scores.end());
    }
    return jni::NewFloatArray(env, values);
  });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeSolver_testOutputNames(JNIEnv* env, jclass,
                                                                                jlong handle) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    // The order of Solver::Test's scores: output blobs in order, each element in order.
    std::vector<std::string> names;
    const auto& nets = jni::GetSolver(handle).test_nets();
    for (size_t i = 0; i < nets.size(); ++i) {
      const cortado::Net& net = *nets[i];
      for (size_t j = 0; j < net.output_blobs().size(); ++j) {
        const std::string& blob = net.blob_names()[net.output_blob_indices()[j]];
        const int count = net.output_blobs()[j]->count();
        for (int k = 0; k < count; ++k) {
          names.push_back(count == 1 ? fmt::format("{}/{}", i, blob)
                                     : fmt::format("{}/{}[{}]", i, blob, k));
        }
      }
    }
    return jni::NewStringArray(env, names);
  });
}

}  // extern "C"
