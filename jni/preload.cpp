// SPDX-License-Identifier: Apache-2.0
// libcortado_preload.so: the first native library the JVM loads (NativeLoader), before
// libcortado.so brings UCX in. UCX's libucs installs handlers for SIGSEGV, SIGBUS, SIGILL and
// SIGFPE as it loads, unless UCX_ERROR_SIGNALS says otherwise; the JVM faults on purpose (null
// checks, safepoints) and its handlers must see those faults, or a JVM thread faulting in the
// moment between libucs's load and JNI_OnLoad (where the shim also gives the signals back) kills
// the executor. This library depends on nothing and only empties that setting.
#include <cstdlib>

namespace {

__attribute__((constructor)) void LeaveTheJvmItsSignals() {
  ::setenv("UCX_ERROR_SIGNALS", "", /*overwrite=*/1);
}

}  // namespace
