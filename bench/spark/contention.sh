#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two Spark workers beside a busy loop: Caffe's LeNet on Fashion-MNIST through spark-submit
# --master local-cluster[2,1,1024] (two executor JVMs of one core each, spark.task.cpus 1),
# batch 32 per worker, ITERS iterations (default 2000), tests and snapshots off; alone and beside
# BUSY busy loops (default 1), with the workers' default threads (their share: 1 each) and with
# -cpuThreads 2 (every core of this host, what a worker took before it followed its share).
# Time per iteration: the mean over worker 0's display windows after the first. The fair share
# beside b busy loops on c cores is c / (c + b) of the quiet rate; the goal is 0.9 of it.
set -euo pipefail
cd "$(dirname "$0")/../.."

iters=${ITERS:-2000}
busy=${BUSY:-1}
source bench/spark/common.sh
prepare_data

work=$(mktemp -d)
source bench/busy_loops.sh
trap 'stop_loops; rm -rf "$work"' EXIT
sed '0,/batch_size: 64/s//batch_size: 32/' examples/spark-fashion-mnist/lenet_cos_train_test.prototxt \
  >"$work/net.prototxt"
solver "$work/net.prototxt" >"$work/solver.prototxt"

run() {  # log, busy loops, extra flags...
  local log=$1 n=$2
  shift 2
  start_loops "$n"
  "$submit" --master 'local-cluster[2,1,1024]' --driver-memory 1g --executor-memory 1g \
    --executor-cores 1 --driver-java-options "$log4j" --class io.cortado.spark.CortadoOnSpark \
    "$jar" -train -clusterSize 2 -conf "$work/solver.prototxt" \
    -model "file:$work/lenet.caffemodel" "$@" >"$log" 2>&1
  stop_loops
  per_iter "$log"
}

cores=$(nproc)
echo "Spark beside busy loops: $cores cores, 2 workers, LeNet, $iters iterations, $(date -u +%F), $(uname -n)"
echo
echo "| threads per worker | busy loops | ms/iter | rate kept | fair share | kept / fair share |"
echo "|---|---|---|---|---|---|"
for threads in share 2; do
  flags=()
  [[ $threads == share ]] || flags=(-cpuThreads "$threads")
  quiet=$(run "$work/quiet.log" 0 "${flags[@]}")
  loaded=$(run "$work/loaded.log" "$busy" "${flags[@]}")
  said=$(grep -o 'CPU threads: [^(]*(.*)' "$work/quiet.log" | head -1 || true)
  awk -v t="${said:-$threads}" -v q="$quiet" -v l="$loaded" -v b="$busy" -v c="$cores" 'BEGIN {
    f = c / (c + b)
    printf "| %s | 0 | %.3f | 1.00 | 1.00 | 1.00 |\n", t, q
    printf "| %s | %d | %.3f | %.2f | %.2f | %.2f |\n", t, b, l, q / l, f, q / l / f }'
done
