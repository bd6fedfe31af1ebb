#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# From a fresh Debian 12 machine: installs what is missing (Debian packages, Fashion-MNIST, a JDK
# and Maven), builds Cortado's native libraries and jar when they are missing or stale, converts
# Fashion-MNIST's IDX files to Parquet once, then trains Caffe's LeNet (10,000 iterations) and
# tests it through spark-submit in local[2] with CortadoOnSpark, CaffeOnSpark's command line,
# printing the test accuracy in Caffe's format (accuracy = 0.89...). Training runs on WORKERS
# workers (default 2): a local cluster of that many executor JVMs (local-cluster), each worker
# on its half of the data with batch 64/WORKERS, so that the total batch stays Caffe's 64, and
# gradients exchanged between them after every iteration; WORKERS=1 trains in one task in
# local[2] with batch 64. Extra arguments go to CortadoOnSpark (e.g. -weights). spark-submit is $SPARK_HOME/bin/spark-submit when SPARK_HOME
# is set, otherwise scala-bridge/bin/spark-submit (Spark from the Maven dependencies).
set -euo pipefail
cd "$(dirname "$0")/../.."

example=examples/spark-fashion-mnist
data=$example/data
build_dir=${BUILD_DIR:-build}
dataset=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}

bash .ci/install-deps.sh
if [[ ! -f $build_dir/cpp/libcortado.so || ! -f $build_dir/cpp/libcortado_jni.so ]]; then
  BUILD_DIR=$build_dir bash .ci/build.sh -DBUILD_TESTS=OFF
fi
find_jar() { local jars=(scala-bridge/target/cortado-*.jar); jar=${jars[0]}; }
find_jar
stale=$(find scala-bridge/pom.xml scala-bridge/src/main "$build_dir/cpp/libcortado.so" \
  "$build_dir/cpp/libcortado_jni.so" -newer "$jar" -print -quit 2>/dev/null || true)
if [[ ! -f $jar || -n $stale ]]; then
  mvn -B -q -f scala-bridge/pom.xml -Dcortado.build.dir="$PWD/$build_dir" -DskipTests -Dmaven.test.skip=true package
  find_jar
fi

submit=scala-bridge/bin/spark-submit
[[ -n ${SPARK_HOME:-} ]] && submit=$SPARK_HOME/bin/spark-submit
# Local runs (every run here) bind Spark to loopback unless SPARK_LOCAL_IP says otherwise.
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
log_options=(--driver-java-options "-Dlog4j2.configurationFile=$PWD/$example/log4j2.properties")
spark_options=(--master 'local[2]' --driver-memory 3g "${log_options[@]}")

mkdir -p "$data"
train=$data/fashion_mnist_train.parquet
test=$data/fashion_mnist_test.parquet
if [[ ! -f $train/_SUCCESS || ! -f $test/_SUCCESS ]]; then
  if [[ ! -d $dataset ]]; then
    echo "Fashion-MNIST not found in $dataset: apt-get install dataset-fashion-mnist" >&2
    exit 1
  fi
  rm -rf "$train" "$test"
  "$submit" "${spark_options[@]}" --class io.cortado.data.IdxToParquet "$jar" \
    "$dataset/train-images-idx3-ubyte.gz" "$dataset/train-labels-idx1-ubyte.gz" "$train" \
    "$dataset/t10k-images-idx3-ubyte.gz" "$dataset/t10k-labels-idx1-ubyte.gz" "$test"
fi

workers=${WORKERS:-2}
solver=$example/lenet_cos_solver.prototxt
if ((workers > 1)); then
  if ((64 % workers != 0)); then
    echo "WORKERS=$workers: the total batch 64 must divide evenly among the workers" >&2
    exit 2
  fi
  # The same net and solver with batch 64/WORKERS per worker.
  net=$data/lenet_cos_train_test_${workers}w.prototxt
  sed "0,/batch_size: 64/s//batch_size: $((64 / workers))/" \
    "$example/lenet_cos_train_test.prototxt" >"$net"
  solver=$data/lenet_cos_solver_${workers}w.prototxt
  sed "s|^net: .*|net: \"$net\"|" "$example/lenet_cos_solver.prototxt" >"$solver"
  spark_options=(--master "local-cluster[$workers,1,1024]" --driver-memory 1g
    --executor-memory 1g --executor-cores 1 "${log_options[@]}")
fi

# Spark does not overwrite an output directory.
rm -rf "$data/test_results"
start=$SECONDS
"$submit" "${spark_options[@]}" --class io.cortado.spark.CortadoOnSpark "$jar" \
  -train -test -conf "$solver" -clusterSize "$workers" \
  -model "file:$PWD/$data/lenet.caffemodel" -output "file:$PWD/$data/test_results" "$@"
echo "spark-submit: training and testing took $((SECONDS - start)) s"
