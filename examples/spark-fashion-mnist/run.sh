#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# From a fresh Debian 12 machine: installs what is missing (Debian packages, Fashion-MNIST, a JDK
# and Maven), builds Cortado's native libraries and jar when they are missing or stale, converts
# Fashion-MNIST's IDX files to Parquet once, then trains Caffe's LeNet (10,000 iterations) and
# tests it through spark-submit in local[2] with CortadoOnSpark, CaffeOnSpark's command line,
# printing the test accuracy in Caffe's format (accuracy = 0.89...). Extra arguments go to
# CortadoOnSpark (e.g. -weights). spark-submit is $SPARK_HOME/bin/spark-submit when SPARK_HOME
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
spark_options=(--master 'local[2]' --driver-memory 3g
  --driver-java-options "-Dlog4j2.configurationFile=$PWD/$example/log4j2.properties")

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

# Spark does not overwrite an output directory.
rm -rf "$data/test_results"
start=$SECONDS
"$submit" "${spark_options[@]}" --class io.cortado.spark.CortadoOnSpark "$jar" \
  -train -test -conf "$example/lenet_cos_solver.prototxt" \
  -model "file:$PWD/$data/lenet.caffemodel" -output "file:$PWD/$data/test_results" "$@"
echo "spark-submit: training and testing took $((SECONDS - start)) s"
