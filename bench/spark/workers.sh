#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two workers through Spark against two ranks of `cortado train`, on this machine: Caffe's LeNet
# on Fashion-MNIST, batch 32 per worker (64 in all), ITERS iterations (default 2000), tests and
# snapshots off, ROUNDS rounds (default 2), alternating:
#   CLI:   two `cortado train` processes (tcp ring on 127.0.0.1, one CPU thread each) reading
#          the LMDB (the Data layer takes every 2nd batch);
#   Spark: spark-submit --master local-cluster[2,1,1024] (two executor JVMs of one core) with
#          CortadoOnSpark -train -clusterSize 2, each worker on its half of the Parquet rows.
# Time per iteration is the mean over rank 0's display windows (100 iterations) after the
# first; the start-up cost is the whole command's wall time less ITERS times that (Spark: JVMs,
# executors, reading and converting the rows, the rendezvous). Target: Spark within 1.10x the
# CLI per iteration. Needs what examples/spark-fashion-mnist/run.sh builds; run it on an
# otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

iters=${ITERS:-2000}
rounds=${ROUNDS:-2}
source bench/spark/common.sh
prepare_data

work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
# The net with the TRAIN batch halved (the first batch_size is the TRAIN phase's).
sed '0,/batch_size: 64/s//batch_size: 32/' examples/fashion-mnist/lenet_train_test.prototxt \
  >"$work/cli_net.prototxt"
sed '0,/batch_size: 64/s//batch_size: 32/' examples/spark-fashion-mnist/lenet_cos_train_test.prototxt \
  >"$work/spark_net.prototxt"
solver "$work/cli_net.prototxt" >"$work/cli_solver.prototxt"
solver "$work/spark_net.prototxt" >"$work/spark_solver.prototxt"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

echo "== 2 workers: Spark (local-cluster, 2 executor JVMs) against 2 ranks of cortado train; LeNet, $iters iterations, batch 32 each"
port=${PORT:-29600}
for round in $(seq "$rounds"); do
  start=$(now)
  peers=127.0.0.1:$port,127.0.0.1:$((port + 1))
  "$cortado" train --solver="$work/cli_solver.prototxt" --threads=1 --world=2 --rank=1 \
    --peers="$peers" >"$work/cli1.log" 2>&1 &
  pids=($!)
  "$cortado" train --solver="$work/cli_solver.prototxt" --threads=1 --world=2 --rank=0 \
    --peers="$peers" >"$work/cli.log" 2>&1
  wait "${pids[@]}"
  pids=()
  cli_wall=$(since "$start")
  port=$((port + 2))
  start=$(now)
  "$submit" --master 'local-cluster[2,1,1024]' --driver-memory 1g --executor-memory 1g \
    --executor-cores 1 --driver-java-options "$log4j" --class io.cortado.spark.CortadoOnSpark \
    "$jar" -train -clusterSize 2 -conf "$work/spark_solver.prototxt" \
    -model "file:$work/lenet.caffemodel" >"$work/spark.log" 2>&1
  spark_wall=$(since "$start")
  cli=$(per_iter "$work/cli.log")
  spark=$(per_iter "$work/spark.log")
  awk -v r="$round" -v c="$cli" -v s="$spark" -v cw="$cli_wall" -v sw="$spark_wall" -v n="$iters" 'BEGIN {
    printf "round %d: cortado train %.3f ms/iter (whole %.1f s, start-up %.1f s); Spark %.3f ms/iter (whole %.1f s, start-up %.1f s); Spark/CLI per iteration %.3fx\n",
      r, c, cw, cw - n * c / 1000, s, sw, sw - n * s / 1000, s / c }'
done
