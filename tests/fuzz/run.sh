#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fuzzes the parsers of untrusted bytes with libFuzzer: builds the targets with clang under
# AddressSanitizer and UBSan (build-asan/, shared with tests/sanitizers/run.sh), then runs each
# for SECONDS (default 30) on a working copy of its seed corpus (build-asan/fuzz/<target>/corpus;
# the seeds in tests/fuzz/corpus are never changed). Prints one line per target: executions, edges
# covered, corpus size, and crashes. A crash, a leak, a timeout (FUZZ_TIMEOUT, default 10 s for
# one input) or an input taking more than 2 GB stops that target; its input is kept under
# build-asan/fuzz/<target>/ and the script exits non-zero.
# UCX is left out: the parsers need no communicator, and libucs installs signal handlers when it
# loads, which would stand between a crash and libFuzzer's report.
# Usage: tests/fuzz/run.sh [SECONDS] [TARGET...]   targets: prototxt caffemodel solverstate datum
#                                                   idx image hdf5 (default: all)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-30}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(prototxt caffemodel solverstate datum idx image hdf5)

bash tests/sanitizers/install-clang.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DWITH_CUDA=OFF -DWITH_JNI=OFF \
  -DWITH_UCX=OFF -DCORTADO_SANITIZE=address,undefined -DCORTADO_FUZZ=ON >/dev/null
cmake --build build-asan -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

# Runs target $1; writes its table line to build-asan/fuzz/$1/result and returns non-zero on a
# failure (the log's report follows the line).
run_target() {
  local t=$1 work=build-asan/fuzz/$1 rc=0 dict=() binary execs edges corpus result
  mkdir -p "$work/corpus"
  cp -n tests/fuzz/corpus/"$t"/* "$work/corpus/" 2>/dev/null || true
  [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="tests/fuzz/$t.dict")
  binary=$(find build-asan -name "fuzz_$t" -type f -perm -u+x | head -1)
  # allocator_may_return_null: a request of hundreds of GB gets null, as from glibc, instead of
  # stopping the run (libhdf5 sizes its metadata cache from the file and checks for null).
  ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" \
    LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    OMP_NUM_THREADS=1 TMPDIR="$work" "$binary" "$work/corpus" "${dict[@]}" \
    -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 \
    -print_final_stats=1 \
    -artifact_prefix="$work/" >"$work/log.txt" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/log.txt" | grep -o '[0-9]*$' ||
    echo '?')
  edges=$(grep -o 'cov: [0-9]*' "$work/log.txt" | tail -1 | grep -o '[0-9]*$' || echo '?')
  corpus=$(find "$work/corpus" -type f | wc -l)
  result=ok
  if ((rc != 0)); then
    result="FAILED (exit $rc): $(grep -m1 -E 'ERROR|runtime error|Test unit written' \
      "$work/log.txt" || true)"
  fi
  printf '%-12s %10s %8s %8s %9s  %s\n' "$t" "$execs" "$edges" "$corpus" "$seconds" "$result" \
    >"$work/result"
  if ((rc != 0)); then
    { grep -E -A30 'ERROR: |runtime error' "$work/log.txt" | head -60 || tail -40 "$work/log.txt"; } \
      >>"$work/result"
  fi
  return $rc
}

# PARALLEL=1 runs the targets at once (for long runs), else one after another.
status=0
pids=()
for t in "${targets[@]}"; do
  if [[ -n ${PARALLEL:-} ]]; then
    run_target "$t" &
    pids+=($!)
  else
    run_target "$t" || status=1
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
printf '%-12s %10s %8s %8s %9s  %s\n' target executions edges corpus seconds result
for t in "${targets[@]}"; do cat "build-asan/fuzz/$t/result"; done
exit $status
