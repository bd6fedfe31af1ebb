#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Spark path's two benchmarks, in one run on this machine (figures in bench/RESULTS.md):
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
build_dir=${BUILD_DIR:-build}
dataset=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
cortado=$build_dir/cpp/tools/cortado
jars=(scala-bridge/target/cortado-*.jar)
jar=${jars[0]}
for f in "$cortado" "$jar"; do
  [[ -f $f ]] || { echo "$f not found: build first (examples/spark-fashion-mnist/run.sh)" >&2; exit 1; }
done
submit=scala-bridge/bin/spark-submit
[[ -n ${SPARK_HOME:-} ]] && submit=$SPARK_HOME/bin/spark-submit
spark_options=(--master 'local[2]' --driver-memory 3g
  --driver-java-options "-Dlog4j2.configurationFile=$PWD/examples/spark-fashion-mnist/log4j2.properties")
export CORTADO_LOG_LEVEL=${CORTADO_LOG_LEVEL:-info}

# Data: the LMDBs of examples/fashion-mnist (the test one too: `cortado train` builds the test
# net) and the Parquet files of examples/spark-fashion-mnist.
mkdir -p examples/fashion-mnist/data
for split in train t10k; do
  name=$([[ $split == train ]] && echo train || echo test)
  lmdb=examples/fashion-mnist/data/fashion_mnist_${name}_lmdb
  if [[ ! -d $lmdb ]]; then
    "$cortado" convert_idx --images="$dataset/$split-images-idx3-ubyte.gz" \
      --labels="$dataset/$split-labels-idx1-ubyte.gz" --out="$lmdb"
  fi
done
parquet=examples/spark-fashion-mnist/data/fashion_mnist_train.parquet
if [[ ! -f $parquet/_SUCCESS ]]; then
  rm -rf "$parquet"
  "$submit" "${spark_options[@]}" --class io.cortado.data.IdxToParquet "$jar" \
    "$dataset/train-images-idx3-ubyte.gz" "$dataset/train-labels-idx1-ubyte.gz" "$parquet"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Caffe's LeNet solver with the given net, ITERS iterations, no tests and no snapshots.
solver() {
  cat <<SOLVER
net: "$1"
test_iter: 100
test_interval: 100000000
test_initialization: false
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 100
max_iter: $iters
snapshot: 0
snapshot_after_train: false
solver_mode: CPU
random_seed: 1701
SOLVER
}
solver "$PWD/examples/fashion-mnist/lenet_train_test.prototxt" >"$work/cli_solver.prototxt"
solver "$PWD/examples/spark-fashion-mnist/lenet_cos_train_test.prototxt" >"$work/spark_solver.prototxt"

# Mean seconds per iteration over the display windows after the first full one: lines
# "Iteration N (X iter/s, Ys/100 iters..." with N > 100.
per_iter() {
  grep -o 'Iteration [0-9]* ([0-9.e+-]* iter/s, [0-9.e+-]*s/[0-9]* iters' "$1" |
    awk '{ n = $2 + 0; split($5, t, "s/"); if (n > 100) { s += t[1]; k += t[2] } }
         END { if (k == 0) exit 1; printf "%.3f", 1000 * s / k }'
}

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
