// SPDX-License-Identifier: Apache-2.0
// Natives of io.cortado.jni.NativeTrainer: a training session (cpp/parallel/trainer.hpp) behind a
// jlong handle. This file only converts: arguments into the solver's typed fields, events into
// TrainerListener calls on the calling thread, bytes, and errors (through Guard).
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/logging.hpp"
#include "io/proto_io.hpp"
#include "io/upgrade.hpp"
#include "io_cortado_jni_NativeTrainer.h"
#include "jni/jni_util.hpp"
#include "net/net_options.hpp"
#include "parallel/trainer.hpp"
#include "proto/caffe.pb.h"

namespace cortado::jni {
namespace {

Trainer& GetTrainer(jlong handle) { return FromHandle<Trainer>(handle, "NativeTrainer"); }

// The solver of create's arguments: the texts, then each override as a typed field.
caffe::SolverParameter SessionParam(JNIEnv* env, jstring solver_text, jstring solver_source,
                                    jstring net_text, jstring net_source, jint max_iter,
                                    jint snapshot_interval, jstring snapshot_prefix,
                                    jboolean tests) {
  const std::string solver_name = ToStdString(env, solver_source, "solverSource");
  caffe::SolverParameter param;
  io::ReadProtoFromTextString(ToStdString(env, solver_text, "solverText"), solver_name, &param);
  io::UpgradeSolverAsNeeded(solver_name, &param);
  if (net_text != nullptr) {
    const std::string net_name = ToStdString(env, net_source, "netSource");
    caffe::NetParameter net;
    io::ReadProtoFromTextString(ToStdString(env, net_text, "netText"), net_name, &net);
    io::UpgradeNetAsNeeded(net_name, &net);
    param.clear_net();
    param.clear_train_net();
    param.clear_train_net_param();
    param.clear_test_net();
    param.clear_test_net_param();
    *param.mutable_net_param() = std::move(net);
  }
  if (max_iter >= 0) param.set_max_iter(max_iter);
  if (snapshot_interval >= 0) param.set_snapshot(snapshot_interval);
  if (snapshot_prefix != nullptr) {
    param.set_snapshot_prefix(ToStdString(env, snapshot_prefix, "snapshotPrefix"));
  }
  if (!tests) ClearTestNets(&param);
  // Snapshots cross JNI as bytes in Caffe's binary-proto format.
  param.set_snapshot_format(caffe::SolverParameter::BINARYPROTO);
  return param;
}

std::vector<Device> Devices(JNIEnv* env, jintArray devices, const caffe::SolverParameter& param) {
  std::vector<Device> result;
  if (devices != nullptr) {
    ArrayElements<jintArray> ids(env, devices, "devices");
    for (jint id : ids) {
      if (id < -1) CORTADO_THROW(kInvalidArgument, "device {}: use -1 (CPU) or a CUDA ordinal", id);
      result.push_back(id == -1 ? Device::Cpu() : Device::Cuda(id));
    }
  }
  if (result.empty()) result.push_back(SolverDevice(param));
  return result;
}

// Calls a TrainerListener on the thread that trains; a Java exception it throws unwinds the
// training loop and stays pending for the caller.
class Listener {
 public:
  Listener(JNIEnv* env, jobject listener) : env_(env), listener_(listener) {
    if (listener == nullptr) CORTADO_THROW(kInvalidArgument, "the TrainerListener is null");
    jclass cls = env->GetObjectClass(listener);
    on_iteration_ = env->GetMethodID(cls, "onIteration", "(IFFID)V");
    on_test_ = env->GetMethodID(cls, "onTest", "(I[Ljava/lang/String;[F)V");
    on_snapshot_ = env->GetMethodID(cls, "onSnapshot", "(I[B[B)V");
    env->DeleteLocalRef(cls);
    CheckJavaException(env);
  }

  // Routes the trainer's events here for the lifetime of this object.
  void Attach(Trainer* trainer) {
    trainer_ = trainer;
    trainer->set_on_display([this](const Display& d) {
      env_->CallVoidMethod(listener_, on_iteration_, d.iter, d.loss, d.learning_rate, d.iterations,
                           d.seconds);
      CheckJavaException(env_);
    });
    trainer->set_on_test([this](int iter) {
      jobjectArray names = NewStringArray(env_, trainer_->root()->TestOutputNames());
      jfloatArray values = NewFloatArray(env_, trainer_->root()->TestScores());
      env_->CallVoidMethod(listener_, on_test_, iter, names, values);
      env_->DeleteLocalRef(names);
      env_->DeleteLocalRef(values);
      CheckJavaException(env_);
    });
    trainer->set_snapshot_sink(
        [this](int iter, const std::string& model, const std::string& state) {
          jbyteArray model_bytes = NewByteArray(env_, model);
          jbyteArray state_bytes = NewByteArray(env_, state);
          env_->CallVoidMethod(listener_, on_snapshot_, iter, model_bytes, state_bytes);
          env_->DeleteLocalRef(model_bytes);
          env_->DeleteLocalRef(state_bytes);
          CheckJavaException(env_);
        });
  }

  ~Listener() {
    if (trainer_ == nullptr) return;
    trainer_->set_on_display(nullptr);
    trainer_->set_on_test(nullptr);
    // Snapshots outside train/step (none are taken) would have nowhere to go: keep them off
    // the file system all the same.
    trainer_->set_snapshot_sink([](int, const std::string&, const std::string&) {});
  }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

 private:
  JNIEnv* env_;
  jobject listener_;
  Trainer* trainer_ = nullptr;
  jmethodID on_iteration_ = nullptr;
  jmethodID on_test_ = nullptr;
  jmethodID on_snapshot_ = nullptr;
};

// The executor's log keeps warnings and errors; the display, test and snapshot lines reach the
// driver through the listener, so the solver does not log them twice.
class QuietScope {
 public:
  QuietScope() { SetThreadQuiet(true); }
  ~QuietScope() { SetThreadQuiet(false); }
  QuietScope(const QuietScope&) = delete;
  QuietScope& operator=(const QuietScope&) = delete;
};

}  // namespace
}  // namespace cortado::jni

namespace jni = cortado::jni;

extern "C" {

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeTrainer_create(
    JNIEnv* env, jclass, jstring solver_text, jstring solver_source, jstring net_text,
    jstring net_source, jintArray devices, jint max_iter, jint snapshot_interval,
    jstring snapshot_prefix, jboolean tests, jlong comm) {
  return jni::Guard(env, jlong{0}, [&] {
    const caffe::SolverParameter param =
        jni::SessionParam(env, solver_text, solver_source, net_text, net_source, max_iter,
                          snapshot_interval, snapshot_prefix, tests);
    const std::vector<cortado::Device> device_list = jni::Devices(env, devices, param);
    cortado::TrainerOptions options;
    options.net = cortado::NetOptionsFromEnvironment();
    if (comm != 0) {
      const auto& handle =
          cortado::jni::FromHandle<jni::CommHandle>(comm, "NativeComm communicator");
      options.comm = handle.comm;
      options.exchange.wire = handle.wire;
    }
    std::unique_ptr<cortado::Trainer> trainer;
    cortado::WithContext(jni::ToStdString(env, solver_source, "solverSource"), [&] {
      trainer = std::make_unique<cortado::Trainer>(param, device_list, options);
    });
    // Never files: snapshots go to the listener of train/step, or nowhere.
    trainer->set_snapshot_sink([](int, const std::string&, const std::string&) {});
    return jni::ToHandle(std::move(trainer));
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeTrainer_dispose(JNIEnv* env, jclass,
                                                                 jlong handle) {
  jni::Guard(env, [&] { jni::DisposeHandle<cortado::Trainer>(handle); });
}

JNIEXPORT jint JNICALL Java_io_cortado_jni_NativeTrainer_numReplicas(JNIEnv* env, jclass,
                                                                     jlong handle) {
  return jni::Guard(env, jint{0}, [&] { return jni::GetTrainer(handle).num_replicas(); });
}

JNIEXPORT jint JNICALL Java_io_cortado_jni_NativeTrainer_useCpuThreads(JNIEnv* env, jclass,
                                                                       jlong handle, jint threads) {
  return jni::Guard(env, jint{0}, [&] {
    if (threads < 0) {
      CORTADO_THROW(kInvalidArgument, "CPU threads must be positive (or 0: every core), not {}",
                    threads);
    }
    cortado::Trainer& trainer = jni::GetTrainer(handle);
    trainer.set_cpu_threads(threads);
    return trainer.cpu_threads_per_replica();
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeTrainer_train(JNIEnv* env, jclass, jlong handle,
                                                               jobject listener) {
  jni::Guard(env, [&] {
    cortado::Trainer& trainer = jni::GetTrainer(handle);
    jni::Listener events(env, listener);
    events.Attach(&trainer);
    const jni::QuietScope quiet;
    trainer.Solve();
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeTrainer_step(JNIEnv* env, jclass, jlong handle,
                                                              jint iterations, jobject listener) {
  jni::Guard(env, [&] {
    cortado::Trainer& trainer = jni::GetTrainer(handle);
    jni::Listener events(env, listener);
    events.Attach(&trainer);
    const jni::QuietScope quiet;
    trainer.Step(iterations);
  });
}

JNIEXPORT jint JNICALL Java_io_cortado_jni_NativeTrainer_iter(JNIEnv* env, jclass, jlong handle) {
  return jni::Guard(env, jint{0}, [&] { return jni::GetTrainer(handle).root()->iter(); });
}

JNIEXPORT jfloat JNICALL Java_io_cortado_jni_NativeTrainer_learningRate(JNIEnv* env, jclass,
                                                                        jlong handle) {
  return jni::Guard(env, jfloat{0},
                    [&] { return jni::GetTrainer(handle).root()->GetLearningRate(); });
}

JNIEXPORT jfloat JNICALL Java_io_cortado_jni_NativeTrainer_smoothedLoss(JNIEnv* env, jclass,
                                                                        jlong handle) {
  return jni::Guard(env, jfloat{0},
                    [&] { return jni::GetTrainer(handle).root()->smoothed_loss(); });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeTrainer_snapshot(JNIEnv* env, jclass,
                                                                          jlong handle,
                                                                          jstring learned_net) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    const cortado::Trainer& trainer = jni::GetTrainer(handle);
    const std::string learned = jni::ToStdString(env, learned_net, "learnedNet");
    return jni::NewByteArrayArray(env, {trainer.ModelBytes(), trainer.StateBytes(learned)});
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeTrainer_restore(JNIEnv* env, jclass, jlong handle,
                                                                 jbyteArray model,
                                                                 jbyteArray state) {
  jni::Guard(env, [&] {
    cortado::Trainer& trainer = jni::GetTrainer(handle);
    const std::string model_bytes = jni::ToBytes(env, model, "model");
    if (state == nullptr) {
      trainer.Restore(model_bytes, nullptr, "the restored model");
    } else {
      const std::string state_bytes = jni::ToBytes(env, state, "state");
      trainer.Restore(model_bytes, &state_bytes, "the restored snapshot");
    }
  });
}

JNIEXPORT jfloatArray JNICALL Java_io_cortado_jni_NativeTrainer_test(JNIEnv* env, jclass,
                                                                     jlong handle) {
  return jni::Guard(env, jfloatArray{nullptr}, [&] {
    cortado::Trainer& trainer = jni::GetTrainer(handle);
    trainer.TestAll();
    return jni::NewFloatArray(env, trainer.root()->TestScores());
  });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeTrainer_testOutputNames(JNIEnv* env,
                                                                                 jclass,
                                                                                 jlong handle) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    return jni::NewStringArray(env, jni::GetTrainer(handle).root()->TestOutputNames());
  });
}

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeTrainer_feedLayers(JNIEnv* env, jclass,
                                                                            jlong handle,
                                                                            jint replica) {
  return jni::Guard(env, jobjectArray{nullptr}, [&] {
    return jni::NewStringArray(env, jni::GetTrainer(handle).FeedLayers(replica));
  });
}

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeTrainer_feed(JNIEnv* env, jclass, jlong handle,
                                                               jint replica, jstring layer) {
  return jni::Guard(env, jlong{0}, [&] {
    std::shared_ptr<cortado::BatchFeed> feed =
        jni::GetTrainer(handle).Feed(replica, jni::ToStdString(env, layer, "layer"));
    return jni::ToHandle(std::make_unique<jni::FeedHandle>(jni::FeedHandle{std::move(feed)}));
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeTrainer_stopAt(JNIEnv* env, jclass, jlong handle,
                                                                jint iteration) {
  jni::Guard(env, [&] { jni::GetTrainer(handle).RequestStopAt(iteration); });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeTrainer_abort(JNIEnv* env, jclass, jlong handle,
                                                               jstring reason) {
  jni::Guard(env, [&] { jni::GetTrainer(handle).Abort(jni::ToStdString(env, reason, "reason")); });
}

}  // extern "C"
