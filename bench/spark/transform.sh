#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Inference throughput of the Spark ML Model (CortadoClassificationModel.transform, rows/s)
# against `cortado test` on the same net and data, CPU, in one run on this machine (figures in
# bench/RESULTS.md, "Spark"; bench/history/spark.md). Target: transform within 1.2x of `cortado test`'s time per row.
#  - LeNet: Fashion-MNIST's 10,000 test images; `cortado test` reads them from LMDB through
#    examples/fashion-mnist's net (Data layer, batch 100), transform from Parquet through
#    examples/spark-ml-pipeline's net (CoSData, batch 100); the weights of
#    examples/spark-fashion-mnist/data/lenet.caffemodel when it exists, else the fillers'.
#  - CaffeNet: BVLC's deploy.prototxt (Input, batch 10), CAFFENET_ROWS (default 200) rows of
#    random 3x227x227 pixels for transform; `cortado test` runs the same layers on a DummyData
#    input of that shape (CaffeNet's time does not depend on the pixel values). Needs
#    ../shared/reference-models; skipped without it.
# `cortado test`'s rows/s is the difference of two runs (N1 and N2 batches, the fastest of 3
# runs each) over their difference in wall time, so that start-up and net building cancel out; transform's is the best
# of 5 passes after a warm-up pass (in which each task slot builds its net), local[1] (one task,
# the native code's threads on every core) and local[2] (two tasks at once); for LeNet also
# the marginal rate, from passes over 10,000 and 60,000 rows in turn, which leaves out each
# job's fixed cost as `cortado test`'s difference leaves out its start-up.
# Needs the native build (BUILD_DIR, default build) and the jar, as
# examples/spark-fashion-mnist/run.sh makes them. Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

iters=0
source bench/spark/common.sh
prepare_data
test_parquet=examples/spark-fashion-mnist/data/fashion_mnist_test.parquet
if [[ ! -f $test_parquet/_SUCCESS ]]; then
  rm -rf "$test_parquet"
  "$submit" --master 'local[2]' --driver-memory 3g --driver-java-options "$log4j" \
    --class io.cortado.data.IdxToParquet "$jar" "$dataset/t10k-images-idx3-ubyte.gz" \
    "$dataset/t10k-labels-idx1-ubyte.gz" "$test_parquet"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Rows/s of `cortado test --model=$1 --weights=$2` from the wall times of $3 and $4 batches of $5
# (the fastest of 3 runs each).
cli_rate() {
  local t=() n i
  for n in "$3" "$4"; do
    local best=
    for i in 1 2 3; do
      local start=$(date +%s.%N)
      CORTADO_LOG_LEVEL=warn "$cortado" test --model="$1" --weights="$2" --iterations="$n" >/dev/null
      local took=$(echo "$(date +%s.%N) - $start" | bc -l)
      if [[ -z $best ]] || (($(echo "$took < $best" | bc -l))); then best=$took; fi
    done
    t+=("$best")
  done
  echo "cortado test: $3 and $4 batches of $5 in ${t[0]} s and ${t[1]} s (fastest of 3):" \
    "$(echo "($4 - $3) * $5 / (${t[1]} - ${t[0]})" | bc -l | xargs printf '%.1f') rows/s"
}

transform() {
  local master
  for master in 'local[1]' 'local[2]'; do
    if ! "$submit" --master "$master" --driver-memory 3g --driver-java-options "$log4j" \
      --class io.cortado.bench.TransformBench "$jar" "$@" 5 >"$work/transform.log" 2>&1; then
      tail -30 "$work/transform.log" >&2
      return 1
    fi
    grep '^transform' "$work/transform.log"
  done
}

fillers() {
  "$submit" --master 'local[1]' --driver-java-options "$log4j" \
    --class io.cortado.bench.TransformBench "$jar" --fillers "$1" "$2"
}

echo "== LeNet, Fashion-MNIST test set (10,000 images)"
weights=examples/spark-fashion-mnist/data/lenet.caffemodel
if [[ ! -f $weights ]]; then
  weights=$work/lenet.caffemodel
  fillers examples/spark-ml-pipeline/lenet_train_test.prototxt "$weights"
  echo "(the fillers' weights: examples/spark-fashion-mnist/run.sh trains the real ones)"
fi
cli_rate examples/fashion-mnist/lenet_train_test.prototxt "$weights" 20 100 100
transform examples/spark-ml-pipeline/lenet_train_test.prototxt "$weights" \
  "file:$PWD/$test_parquet" 10000
# The marginal rate: passes over 10,000 and 60,000 training images in turn (Spark's fixed cost
# per job cancels out, as start-up does in `cortado test`'s difference).
transform examples/spark-ml-pipeline/lenet_train_test.prototxt "$weights" \
  "file:$PWD/$parquet" 10000,60000

if [[ -d ../shared/reference-models/bvlc_reference_caffenet ]]; then
  rows=${CAFFENET_ROWS:-200}
  echo "== CaffeNet (deploy.prototxt, batch 10, the fillers' weights), $rows rows of random 3x227x227 pixels"
  deploy=../shared/reference-models/bvlc_reference_caffenet/deploy.prototxt
  # The same layers on a DummyData input of the deploy input's shape.
  python3 - "$deploy" >"$work/caffenet_dummy.prototxt" <<'PY'
import sys
text = open(sys.argv[1]).read()
layers = text[text.index("layer {"):]
rest = layers[layers.index("\nlayer {") + 1:]  # every layer after the Input
print('name: "CaffeNet"\nlayer { name: "data" type: "DummyData" top: "data"\n'
      '  dummy_data_param { shape { dim: 10 dim: 3 dim: 227 dim: 227 }\n'
      '    data_filler { type: "uniform" min: 0 max: 255 } } }')
print(rest)
PY
  fillers "$deploy" "$work/caffenet.caffemodel"
  cli_rate "$work/caffenet_dummy.prototxt" "$work/caffenet.caffemodel" 3 13 10
  transform "$deploy" "$work/caffenet.caffemodel" "random:3,227,227" "$rows"
else
  echo "== CaffeNet skipped: ../shared/reference-models not found"
fi
