#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The C++ tests under sanitizers, built with clang (Debian's clang-14):
#   thread:            the communication and parallel-training tests (threads, sockets, forked
#                      ranks) under ThreadSanitizer, in build-tsan/;
#   address,undefined: every other C++ test under AddressSanitizer and UBSan, in build-asan/
#                      (the fuzz targets' build: tests/fuzz/run.sh shares it).
# Usage: tests/sanitizers/run.sh [thread|address|all]   (default all). Exits non-zero on any
# report or failing test. The MPI tests need mpirun and an uninstrumented OpenMPI: they run in the
# plain build only.
set -euo pipefail
cd "$(dirname "$0")/../.."
which=${1:-all}
jobs=$(nproc)

bash tests/sanitizers/install-clang.sh

# Suites of the communication and parallel code (tests/comm, tests/parallel) that run without
# mpirun.
threaded='Tcp*:SpawnRanks*:RootRendezvous*:DataShard*:DistributedTrainer*:SessionInfo*:Trainer*'
mpi='Mpi*:*Mpirun*'

configure() {  # build dir, sanitizers, extra cmake arguments...
  local dir=$1 sanitize=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DWITH_CUDA=OFF -DWITH_JNI=OFF -DCORTADO_SANITIZE="$sanitize" "$@" >/dev/null
}

status=0
if [[ $which == thread || $which == all ]]; then
  echo "== ThreadSanitizer: $threaded"
  configure build-tsan thread
  cmake --build build-tsan -j "$jobs" --target cortado_tests cortado_cli
  # One OpenMP thread: the races looked for are between our own threads, not inside the
  # (uninstrumented) OpenMP and BLAS runtimes.
  OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    "$(find build-tsan -name cortado_tests -type f -perm -u+x | head -1)" \
    --gtest_filter="$threaded" --gtest_brief=1 || status=1
fi
if [[ $which == address || $which == all ]]; then
  echo "== AddressSanitizer + UBSan: every other C++ test"
  configure build-asan address,undefined -DCORTADO_FUZZ=ON
  cmake --build build-asan -j "$jobs" --target cortado_tests cortado_cli
  ASAN_OPTIONS="detect_leaks=1" LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" OMP_NUM_THREADS=1 \
    "$(find build-asan -name cortado_tests -type f -perm -u+x | head -1)" \
    --gtest_filter="-$threaded:$mpi" --gtest_brief=1 || status=1
fi
exit $status
