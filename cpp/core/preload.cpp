// SPDX-License-Identifier: Apache-2.0
// libcortado_preload.so: sets what must be in the environment before the libraries libcortado.so
// links start. It depends on nothing but libc. A JVM loads it first (NativeLoader), before
// libcortado.so and what that links; libcortado.so links it too, for cortado_openmp_wait.
//
// OpenMP's waits: libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, as it starts. By
// default an idle OpenMP thread spins for 300,000 rounds (milliseconds) before it sleeps; on
// cores shared with other work (executors of other jobs, busy loops) those spinning threads take
// the cores the threads still computing need, and a training run falls to a fraction of its
// fair share. Unless the user set either variable, OMP_WAIT_POLICY=passive: they sleep at once
// (measured on LeNet, 2 threads, 2 cores: about 5% slower alone, but 2-3x faster beside two busy
// loops than with the default spin; bench/RESULTS.md, "CPU training on shared cores"). OpenBLAS and
// oneDNN (Debian's builds) run on the same OpenMP runtime. Where libgomp started before this
// library (a program linked with libcortado.so starts every library it links before any constructor
// runs), setting it here is too late: such a program calls RestartForOpenMpWait
// (core/openmp_wait.hpp) first thing (the cortado tool does).
//
// UCX in a JVM: UCX's libucs installs handlers for SIGSEGV, SIGBUS, SIGILL and SIGFPE as it
// loads, unless UCX_ERROR_SIGNALS says otherwise; the JVM faults on purpose (null checks,
// safepoints) and its handlers must see those faults, or a JVM thread faulting in the moment
// between libucs's load and JNI_OnLoad (where the shim also gives the signals back) kills the
// executor. In a JVM (libjvm's JNI_GetCreatedJavaVMs is there) that setting is emptied.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

// Sets Cortado's OpenMP waits in the environment (passive), marked as Cortado's: here before
// OpenMP starts, or by RestartForOpenMpWait before the program starts again.
extern "C" __attribute__((visibility("default"))) void cortado_openmp_wait_set() {
  ::setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/1);
  ::setenv("CORTADO_OPENMP_WAIT", "1", /*overwrite=*/1);
}

namespace {

char g_openmp_wait[160] = "";
int g_restart = 0;

__attribute__((constructor)) void SetTheEnvironment() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (policy != nullptr && std::getenv("CORTADO_OPENMP_WAIT") != nullptr) {
    std::snprintf(g_openmp_wait, sizeof g_openmp_wait, "OMP_WAIT_POLICY=%s, set by Cortado",
                  policy);
  } else if (policy != nullptr) {
    std::snprintf(g_openmp_wait, sizeof g_openmp_wait, "OMP_WAIT_POLICY=%s, as set", policy);
  } else if (spin != nullptr) {
    std::snprintf(g_openmp_wait, sizeof g_openmp_wait, "GOMP_SPINCOUNT=%s, as set", spin);
  } else if (void* gomp = ::dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
    ::dlclose(gomp);
    g_restart = 1;
    std::snprintf(g_openmp_wait, sizeof g_openmp_wait,
                  "OpenMP's default (it started before Cortado could set OMP_WAIT_POLICY)");
  } else {
    cortado_openmp_wait_set();
    std::snprintf(g_openmp_wait, sizeof g_openmp_wait, "OMP_WAIT_POLICY=passive, set by Cortado");
  }
  if (::dlsym(RTLD_DEFAULT, "JNI_GetCreatedJavaVMs") != nullptr) {
    ::setenv("UCX_ERROR_SIGNALS", "", /*overwrite=*/1);
  }
}

}  // namespace

// How OpenMP's idle threads wait in this process, and who chose it (Context::OpenMpWait).
extern "C" __attribute__((visibility("default"))) const char* cortado_openmp_wait() {
  return g_openmp_wait;
}

// 1 when OpenMP started before this library could set its waits, and the user set none: the
// program must start again with them set to have them (Context::RestartForOpenMpWait).
extern "C" __attribute__((visibility("default"))) int cortado_openmp_wait_restart() {
  return g_restart;
}
