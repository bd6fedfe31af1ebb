// SPDX-License-Identifier: Apache-2.0
// Natives of io.cortado.jni.NativeComm: a listening socket and a communicator
// (cpp/comm/communicator.hpp) behind jlong handles. A communicator handle holds a share of it,
// so the trainer built with it (NativeTrainer.create) and the handle may be freed in any order.
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/tcp/tcp_communicator.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "io_cortado_jni_NativeComm.h"
#include "jni/jni_util.hpp"
#if CORTADO_WITH_UCX
#include "comm/ucx/ucx_communicator.hpp"
#endif

namespace cortado::jni {
namespace {

comm::TcpListener& GetListener(jlong handle) {
  return FromHandle<comm::TcpListener>(handle, "NativeComm listener");
}

}  // namespace

comm::Communicator& GetComm(jlong handle) {
  std::shared_ptr<comm::Communicator>& shared =
      FromHandle<CommHandle>(handle, "NativeComm communicator").comm;
  return *shared;
}

}  // namespace cortado::jni

namespace jni = cortado::jni;
namespace comm = cortado::comm;

extern "C" {

JNIEXPORT jobjectArray JNICALL Java_io_cortado_jni_NativeComm_backends(JNIEnv* env, jclass) {
  return jni::Guard(env, jobjectArray{nullptr},
                    [&] { return jni::NewStringArray(env, comm::CommunicatorBackends()); });
}

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeComm_listen(JNIEnv* env, jclass, jstring host,
                                                              jint first_port, jint last_port) {
  return jni::Guard(env, jlong{0}, [&] {
    return jni::ToHandle(
        comm::TcpListener::OpenInRange(jni::ToStdString(env, host, "host"), first_port, last_port));
  });
}

JNIEXPORT jint JNICALL Java_io_cortado_jni_NativeComm_port(JNIEnv* env, jclass, jlong listener) {
  return jni::Guard(env, jint{0}, [&] { return jni::GetListener(listener).port(); });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeComm_closeListener(JNIEnv* env, jclass,
                                                                    jlong listener) {
  jni::Guard(env, [&] { jni::DisposeHandle<comm::TcpListener>(listener); });
}

JNIEXPORT jstring JNICALL Java_io_cortado_jni_NativeComm_setExchangePrecision(JNIEnv* env, jclass,
                                                                              jlong handle,
                                                                              jstring precision) {
  return jni::Guard(env, jstring{nullptr}, [&] {
    auto& comm_handle = jni::FromHandle<jni::CommHandle>(handle, "NativeComm communicator");
    const std::string text = jni::ToStdString(env, precision, "precision");
    std::optional<comm::WireType> wire;
    if (!comm::ParseWireType(text, &wire)) {
      CORTADO_THROW(kInvalidArgument,
                    "the exchange precision must be auto, float32, bfloat16 or float16, not '{}'",
                    text);
    }
    comm_handle.wire = wire;
    std::string effective = "auto";
    if (wire) {
      effective = comm_handle.comm->SupportsWire(*wire) ? comm::WireTypeName(*wire) : "float32";
    }
    return jni::NewString(env, effective);
  });
}

JNIEXPORT jbyteArray JNICALL Java_io_cortado_jni_NativeComm_rootRendezvous(JNIEnv* env, jclass,
                                                                           jstring backend) {
  return jni::Guard(env, jbyteArray{nullptr}, [&] {
    return jni::NewByteArray(env, comm::RootRendezvous(jni::ToStdString(env, backend, "backend")));
  });
}

JNIEXPORT jlong JNICALL Java_io_cortado_jni_NativeComm_connect(
    JNIEnv* env, jclass, jlong listener, jstring backend, jint rank, jint world, jobjectArray peers,
    jstring token, jint attempt, jbyteArray rendezvous, jint device, jdouble connect_timeout_s,
    jdouble timeout_s, jint first_port, jint last_port, jstring allreduce, jint latency_kb,
    jboolean hierarchical) {
  // The listener is this call's, whatever happens.
  std::unique_ptr<comm::TcpListener> owned(
      reinterpret_cast<comm::TcpListener*>(static_cast<intptr_t>(listener)));
  return jni::Guard(env, jlong{0}, [&] {
    comm::CommOptions options;
    options.backend = jni::ToStdString(env, backend, "backend");
    options.rank = rank;
    options.world_size = world;
    options.peers = jni::ToStdStrings(env, peers, "peers");
    options.token = jni::ToStdString(env, token, "token");
    options.attempt = attempt;
    options.device = device;
    options.connect_timeout_s = connect_timeout_s;
    options.timeout_s = timeout_s;
    options.first_port = first_port;
    options.last_port = last_port;
    // Checked here for every backend, as `cortado train` checks its flags: tcp's AllReduce
    // follows them; the tcp ring that ucx and nccl set up over takes `hierarchical` only; mpi
    // reads none.
    options.allreduce_algorithm = jni::ToStdString(env, allreduce, "allreduce");
    if (options.allreduce_algorithm != "auto" && options.allreduce_algorithm != "ring" &&
        options.allreduce_algorithm != "doubling" && options.allreduce_algorithm != "halving") {
      CORTADO_THROW(kInvalidArgument, "allreduce must be auto, ring, doubling or halving, not '{}'",
                    options.allreduce_algorithm);
    }
    if (latency_kb < 1) {
      CORTADO_THROW(kInvalidArgument, "latencyKb must be a positive number of KB, not {}",
                    latency_kb);
    }
    options.latency_bytes = static_cast<size_t>(latency_kb) << 10;
    options.hierarchical = hierarchical == JNI_TRUE;
    // Null: nothing from rank 0.
    comm::SetRootRendezvous(
        rendezvous == nullptr ? std::string() : jni::ToBytes(env, rendezvous, "rendezvous"),
        &options);
    std::unique_ptr<comm::Communicator> communicator;
    if (options.backend == "tcp") {
      if (owned == nullptr && world > 1) {
        CORTADO_THROW(kInvalidArgument, "the tcp backend needs this rank's listener");
      }
      communicator = comm::CreateTcpCommunicator(options, std::move(owned));
#if CORTADO_WITH_UCX
    } else if (options.backend == "ucx") {
      // Set up through the tcp ring on this listener.
      communicator = comm::CreateUcxCommunicator(options, std::move(owned));
#endif
    } else {
      // mpi meets through its own port; nccl's bootstrap ring listens on peers[rank] itself.
      owned.reset();
      communicator = comm::CreateCommunicator(options);
    }
    return jni::ToHandle(std::make_unique<jni::CommHandle>(jni::CommHandle{
        std::shared_ptr<comm::Communicator>(std::move(communicator)), std::nullopt}));
  });
}

JNIEXPORT jstring JNICALL Java_io_cortado_jni_NativeComm_backend(JNIEnv* env, jclass, jlong c) {
  return jni::Guard(env, jstring{nullptr},
                    [&] { return jni::NewString(env, jni::GetComm(c).backend()); });
}

JNIEXPORT jstring JNICALL Java_io_cortado_jni_NativeComm_describe(JNIEnv* env, jclass, jlong c) {
  return jni::Guard(env, jstring{nullptr},
                    [&] { return jni::NewString(env, jni::GetComm(c).Describe()); });
}

JNIEXPORT jstring JNICALL Java_io_cortado_jni_NativeComm_waitingOn(JNIEnv* env, jclass, jlong c,
                                                                   jdouble min_seconds) {
  return jni::Guard(env, jstring{nullptr},
                    [&] { return jni::NewString(env, jni::GetComm(c).WaitingOn(min_seconds)); });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeComm_abort(JNIEnv* env, jclass, jlong c,
                                                            jstring reason) {
  jni::Guard(env, [&] { jni::GetComm(c).Abort(jni::ToStdString(env, reason, "reason")); });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeComm_allReduce(JNIEnv* env, jclass, jlong c,
                                                                jfloatArray data) {
  jni::Guard(env, [&] {
    comm::Communicator& communicator = jni::GetComm(c);
    jni::ArrayElements<jfloatArray> values(env, data, "data", /*write_back=*/true);
    communicator.AllReduce(values.data(), values.size());
  });
}

JNIEXPORT void JNICALL Java_io_cortado_jni_NativeComm_dispose(JNIEnv* env, jclass, jlong c) {
  jni::Guard(env, [&] { jni::DisposeHandle<jni::CommHandle>(c); });
}

}  // extern "C"
