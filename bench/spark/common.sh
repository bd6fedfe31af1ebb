# SPDX-License-Identifier: Apache-2.0
# Sourced by bench/spark/run.sh and bench/spark/workers.sh, from the repository root, with
# `iters` set: the built tool and jar (CORTADO_JAR, else scala-bridge/target/cortado-*.jar), spark-submit, the Fashion-MNIST data both paths read, the
# solver both paths train with, and the reading of time per iteration from a training log.
build_dir=${BUILD_DIR:-build}
dataset=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
cortado=$build_dir/cpp/tools/cortado
jars=(scala-bridge/target/cortado-*.jar)
jar=${CORTADO_JAR:-${jars[0]}}
for f in "$cortado" "$jar"; do
  [[ -f $f ]] || { echo "$f not found: build first (examples/spark-fashion-mnist/run.sh)" >&2; exit 1; }
done
submit=scala-bridge/bin/spark-submit
[[ -n ${SPARK_HOME:-} ]] && submit=$SPARK_HOME/bin/spark-submit
# Local runs (every run here) bind Spark to loopback unless SPARK_LOCAL_IP says otherwise.
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
log4j="-Dlog4j2.configurationFile=$PWD/examples/spark-fashion-mnist/log4j2.properties"
export CORTADO_LOG_LEVEL=${CORTADO_LOG_LEVEL:-info}

# The LMDBs of examples/fashion-mnist (the test one too: `cortado train` builds the test net)
# and the training Parquet file of examples/spark-fashion-mnist, made once.
prepare_data() {
  mkdir -p examples/fashion-mnist/data
  local split name lmdb
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
    "$submit" --master 'local[2]' --driver-memory 3g --driver-java-options "$log4j" \
      --class io.cortado.data.IdxToParquet "$jar" "$dataset/train-images-idx3-ubyte.gz" \
      "$dataset/train-labels-idx1-ubyte.gz" "$parquet"
  fi
}

# Caffe's LeNet solver with net $1, $iters iterations, no tests and no snapshots.
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

# Mean milliseconds per iteration over the display windows after the first full one: lines
# "Iteration N (X iter/s, Ys/100 iters..." with N > 100.
per_iter() {
  grep -o 'Iteration [0-9]* ([0-9.e+-]* iter/s, [0-9.e+-]*s/[0-9]* iters' "$1" |
    awk '{ n = $2 + 0; split($5, t, "s/"); if (n > 100) { s += t[1]; k += t[2] } }
         END { if (k == 0) exit 1; printf "%.3f", 1000 * s / k }'
}
