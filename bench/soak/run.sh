#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak: long training runs with their memory (RSS), open file descriptors and threads sampled
# every SAMPLE seconds (default 5), to show they stay flat after warm-up.
#   cli:   `cortado train`, Caffe's LeNet on Fashion-MNIST (LMDB), CLI_ITERS iterations (default
#          100000), tests every 5000 and snapshots every 10000 (into a temporary directory);
#   spark: CortadoOnSpark -train -clusterSize 2 on local-cluster[2,1,1024] (two executor JVMs),
#          SPARK_ITERS iterations (default 20000), snapshots every 5000; both executors sampled.
# Usage: bench/soak/run.sh [cli|spark|all]   Writes OUT (default bench/soak/out)/<mode>.csv
# (seconds, iteration, process, rss_kb, fds, threads) and prints, per process, the figures at
# 10%, 50% and the end of the run and the growth after warm-up (from the 10% sample).
# Needs what examples/spark-fashion-mnist/run.sh builds.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-all}
out=${OUT:-bench/soak/out}
sample=${SAMPLE:-5}
iters=100  # for common.sh's solver(); each mode sets its own below
source bench/spark/common.sh
prepare_data
mkdir -p "$out"
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT

# sample CSV LOG PID... : one line per process per SAMPLE seconds while the first PID lives.
sample_loop() {
  local csv=$1 log=$2
  shift 2
  local start now iter pid rss fds threads
  start=$(date +%s)
  echo "seconds,iteration,process,rss_kb,fds,threads" >"$csv"
  while kill -0 "$1" 2>/dev/null; do
    now=$(($(date +%s) - start))
    iter=$(grep -o 'Iteration [0-9]*' "$log" 2>/dev/null | tail -1 | grep -o '[0-9]*' || echo 0)
    for pid in "$@"; do
      rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
      threads=$(awk '/^Threads/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
      fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
      [[ -n $rss ]] && echo "$now,${iter:-0},$pid,$rss,$fds,$threads" >>"$csv"
    done
    sleep "$sample"
  done
}

# The figures per process: at the first sample past 10% and 50% of the iterations, and the
# last; growth from the 10% sample to the last.
summarize() {
  local csv=$1 total=$2
  awk -F, -v total="$total" 'NR > 1 {
      p = $3; last[p] = $0; n[p]++
      if (!(p in w) && $2 >= 0.1 * total) w[p] = $0
      if (!(p in h) && $2 >= 0.5 * total) h[p] = $0
      if ($4 > maxrss[p]) maxrss[p] = $4
    }
    END {
      for (p in last) {
        split(w[p], a, ","); split(h[p], b, ","); split(last[p], c, ",")
        printf "  process %s: %d samples; RSS %.1f / %.1f / %.1f MiB (10%% / 50%% / end, iterations %d / %d / %d), max %.1f MiB, growth after warm-up %+.1f MiB; fds %d / %d / %d; threads %d / %d / %d\n",
          p, n[p], a[4] / 1024, b[4] / 1024, c[4] / 1024, a[2], b[2], c[2], maxrss[p] / 1024,
          (c[4] - a[4]) / 1024, a[5], b[5], c[5], a[6], b[6], c[6]
      }
    }' "$csv"
}

if [[ $mode == cli || $mode == all ]]; then
  iters=${CLI_ITERS:-100000}
  solver examples/fashion-mnist/lenet_train_test.prototxt |
    sed -e 's/^test_interval: .*/test_interval: 5000/' -e 's/^snapshot: 0/snapshot: 10000/' \
      -e 's/^display: 100$/display: 1000/' \
      -e "s|^snapshot_after_train: false|snapshot_prefix: \"$work/lenet\"|" >"$work/cli_solver.prototxt"
  echo "== soak: cortado train, LeNet, $iters iterations"
  "$cortado" train --solver="$work/cli_solver.prototxt" >"$work/cli.log" 2>&1 &
  pids=($!)
  sample_loop "$out/cli.csv" "$work/cli.log" "${pids[0]}"
  wait "${pids[0]}" || { tail -20 "$work/cli.log"; exit 1; }
  pids=()
  grep -E 'Test net output|Optimization Done' "$work/cli.log" | tail -3
  summarize "$out/cli.csv" "$iters"
fi

if [[ $mode == spark || $mode == all ]]; then
  iters=${SPARK_ITERS:-20000}
  sed '0,/batch_size: 64/s//batch_size: 32/' \
    examples/spark-fashion-mnist/lenet_cos_train_test.prototxt >"$work/spark_net.prototxt"
  solver "$work/spark_net.prototxt" |
    sed -e 's/^snapshot: 0/snapshot: 5000/' -e 's/^display: 100$/display: 1000/' \
      -e "s|^snapshot_after_train: false|snapshot_prefix: \"file:$work/spark\"|" \
      >"$work/spark_solver.prototxt"
  echo "== soak: Spark, 2 workers (local-cluster[2,1,1024]), LeNet, $iters iterations"
  "$submit" --master 'local-cluster[2,1,1024]' --driver-memory 1g --executor-memory 1g \
    --executor-cores 1 --driver-java-options "$log4j" --class io.cortado.spark.CortadoOnSpark \
    "$jar" -train -clusterSize 2 -conf "$work/spark_solver.prototxt" \
    -model "file:$work/spark.caffemodel" >"$work/spark.log" 2>&1 &
  pids=($!)
  executors=()
  for _ in $(seq 120); do
    mapfile -t executors < <(pgrep -f CoarseGrainedExecutorBackend || true)
    ((${#executors[@]} >= 2)) && grep -q 'Iteration' "$work/spark.log" && break
    sleep 1
  done
  ((${#executors[@]} >= 2)) || { tail -20 "$work/spark.log"; echo "no executors" >&2; exit 1; }
  sample_loop "$out/spark.csv" "$work/spark.log" "${executors[@]}"
  wait "${pids[0]}" || { tail -20 "$work/spark.log"; exit 1; }
  pids=()
  summarize "$out/spark.csv" "$iters"
fi
