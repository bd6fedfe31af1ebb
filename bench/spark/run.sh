#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Spark path's two benchmarks, in one run on this machine (figures in bench/RESULTS.md, "Spark"; bench/history/spark.md):
#  1. feed: how fast the JVM fills a native feed layer (MB/s into the native queue) against how
#     fast LeNet training consumes data (io.cortado.bench.FeedBench). Target: at least 10x.
#  2. overhead: Caffe's LeNet on Fashion-MNIST for ITERS iterations (default 1000) trained by
#     `cortado train` from LMDB and by spark-submit (CortadoOnSpark -train, local[2]) from
#     Parquet, same solver, same net but for the data layer, tests off; each run ROUNDS times
#     (default 2), alternating. Time per iteration is the solver's own display windows (every
#     100 iterations) after the first window (warm-up); the wall time of each whole command is
#     shown too. Target: the Spark path within 1.15x the CLI's time per iteration.
# Needs the native build (BUILD_DIR, default build) and the jar (mvn package), as
# examples/spark-fashion-mnist/run.sh makes them, and Debian's dataset-fashion-mnist. Run it on
# an otherwise idle machine: both paths use both cores.
set -euo pipefail
cd "$(dirname "$0")/../.."

iters=${ITERS:-1000}
rounds=${ROUNDS:-2}
source bench/spark/common.sh
spark_options=(--master 'local[2]' --driver-memory 3g --driver-java-options "$log4j")
prepare_data

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
solver "$PWD/examples/fashion-mnist/lenet_train_test.prototxt" >"$work/cli_solver.prototxt"
solver "$PWD/examples/spark-fashion-mnist/lenet_cos_train_test.prototxt" >"$work/spark_solver.prototxt"

# The display windows' ms/iter after the first window, for the record.
windows() {
  grep -o 'Iteration [0-9]* ([0-9.e+-]* iter/s, [0-9.e+-]*s/[0-9]* iters' "$1" |
    awk '{ n = $2 + 0; split($5, t, "s/"); if (n > 100) printf " %.1f", 1000 * t[1] / t[2] }'
}

echo "== feed throughput"
CORTADO_LOG_LEVEL=warn "$submit" "${spark_options[@]}" --class io.cortado.bench.FeedBench "$jar" \
  examples/spark-fashion-mnist/lenet_cos_train_test.prototxt "${SECONDS_PER_MEASURE:-5}" 2>/dev/null

echo "== Spark path against cortado train: LeNet, $iters iterations, batch 64"
for round in $(seq "$rounds"); do
  start=$(date +%s.%N)
  "$cortado" train --solver="$work/cli_solver.prototxt" >"$work/cli.log" 2>&1
  cli_wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  start=$(date +%s.%N)
  "$submit" "${spark_options[@]}" --class io.cortado.spark.CortadoOnSpark "$jar" -train \
    -conf "$work/spark_solver.prototxt" -model "file:$work/lenet.caffemodel" >"$work/spark.log" 2>&1
  spark_wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
  cli=$(per_iter "$work/cli.log")
  spark=$(per_iter "$work/spark.log")
  printf 'round %d: cortado train %s ms/iter (whole command %.1f s); Spark %s ms/iter (whole spark-submit %.1f s); Spark/CLI per iteration %.3fx\n' \
    "$round" "$cli" "$cli_wall" "$spark" "$spark_wall" "$(awk -v a="$spark" -v b="$cli" 'BEGIN { print a / b }')"
  echo "  windows (ms/iter): cortado train$(windows "$work/cli.log"); Spark$(windows "$work/spark.log")"
done
