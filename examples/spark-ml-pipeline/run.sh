#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A Spark ML Pipeline (StringIndexer -> CortadoClassifier -> IndexToString) that trains Caffe's
# LeNet on Fashion-MNIST in local[2] and predicts the 10,000 test images: prints sample
# predictions and the test accuracy, saves and reloads the PipelineModel, and writes the training
# curves to data/training_curves.png. From a fresh Debian 12 machine: installs what is missing,
# builds the native libraries and jar when missing or stale, converts the IDX files to Parquet
# once (shared with examples/spark-fashion-mnist). ITERATIONS (default: the solver's 2,000)
# sets the classifier's maxIter.
set -euo pipefail
cd "$(dirname "$0")/../.."

example=examples/spark-ml-pipeline
data=$example/data
parquet=examples/spark-fashion-mnist/data
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
spark_options=(--master 'local[2]' --driver-memory 3g
  --driver-java-options "-Dlog4j2.configurationFile=$PWD/examples/spark-fashion-mnist/log4j2.properties")

train=$parquet/fashion_mnist_train.parquet
test=$parquet/fashion_mnist_test.parquet
if [[ ! -f $train/_SUCCESS || ! -f $test/_SUCCESS ]]; then
  if [[ ! -d $dataset ]]; then
    echo "Fashion-MNIST not found in $dataset: apt-get install dataset-fashion-mnist" >&2
    exit 1
  fi
  mkdir -p "$parquet"
  rm -rf "$train" "$test"
  "$submit" "${spark_options[@]}" --class io.cortado.data.IdxToParquet "$jar" \
    "$dataset/train-images-idx3-ubyte.gz" "$dataset/train-labels-idx1-ubyte.gz" "$train" \
    "$dataset/t10k-images-idx3-ubyte.gz" "$dataset/t10k-labels-idx1-ubyte.gz" "$test"
fi

mkdir -p "$data"
"$submit" "${spark_options[@]}" --class io.cortado.examples.FashionMnistPipeline "$jar" \
  "file:$PWD/$train" "file:$PWD/$test" "$example/lenet_solver.prototxt" "file:$PWD/$data" \
  ${ITERATIONS:+"$ITERATIONS"}
