#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cortado from Java (examples/java/README.md): builds io.cortado.examples.FashionMnistJava with
# Maven against Cortado's jar and runs it through spark-submit in local[2]: Cortado.train on
# Fashion-MNIST (LeNet, the log through a progress listener), testAsJava, features, and a Spark ML
# Pipeline with CortadoClassifier. From a fresh Debian 12 machine: installs what is missing, builds
# the native libraries and the jar when missing or stale, converts the IDX files to Parquet once
# (shared with examples/spark-fashion-mnist).
#
# ITERATIONS sets both trainings' iterations (default: the solver's 2,000). CHECK=1 checks the
# printed results and exits non-zero when one is off: both test accuracies at least
# MIN_ACCURACY (default 0.7; 300-iteration runs here reached 0.80 to 0.83), and one features
# row per test image. CI runs `ITERATIONS=300 CHECK=1`.
# CORTADO_JAR names the Cortado jar to build and run against (nothing of Cortado is built then);
# default scala-bridge/target/cortado-*.jar. SPARK4=1 builds the example with -Pspark4 against
# the jar of scala-bridge's -Pspark4 build and runs it with $SPARK_HOME/bin/spark-submit, which
# must be Spark 4.1 (the bundled scala-bridge/bin/spark-submit is Spark 3.5).
set -euo pipefail
cd "$(dirname "$0")/../.."

example=examples/java
data=$example/data
parquet=examples/spark-fashion-mnist/data
build_dir=${BUILD_DIR:-build}
dataset=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
spark4=${SPARK4:-0}

profile=()
find_jar() { local jars=(scala-bridge/target/cortado-*.jar); jar=${jars[0]}; }
if [[ $spark4 == 1 ]]; then
  if [[ -z ${SPARK_HOME:-} ]]; then
    echo "SPARK4=1 needs SPARK_HOME: a Spark 4.1 installation" >&2
    exit 2
  fi
  profile=(-Pspark4)
  find_jar() { local jars=(scala-bridge/target/spark4/cortado-*-spark4_2.13.jar); jar=${jars[0]}; }
fi

bash .ci/install-deps.sh
if [[ -n ${CORTADO_JAR:-} ]]; then
  jar=$CORTADO_JAR
else
  if [[ ! -f $build_dir/cpp/libcortado.so || ! -f $build_dir/cpp/libcortado_jni.so ]]; then
    BUILD_DIR=$build_dir bash .ci/build.sh -DBUILD_TESTS=OFF
  fi
  find_jar
  stale=$(find scala-bridge/pom.xml scala-bridge/src/main "$build_dir/cpp/libcortado.so" \
    "$build_dir/cpp/libcortado_jni.so" -newer "$jar" -print -quit 2>/dev/null || true)
  if [[ ! -f $jar || -n $stale ]]; then
    mvn -B -q -f scala-bridge/pom.xml "${profile[@]}" -Dcortado.build.dir="$PWD/$build_dir" \
      -DskipTests -Dmaven.test.skip=true package
    find_jar
  fi
fi
jar=$(realpath "$jar")

# The example against that jar: target/cortado-java-example-VERSION.jar (target/spark4/ with
# SPARK4=1).
mvn -B -q -f $example/pom.xml "${profile[@]}" -Dcortado.jar="$jar" package
example_jars=("$example"/target/cortado-java-example-*.jar)
if [[ $spark4 == 1 ]]; then example_jars=("$example"/target/spark4/cortado-java-example-*.jar); fi
example_jar=${example_jars[0]}

submit=scala-bridge/bin/spark-submit
[[ -n ${SPARK_HOME:-} ]] && submit=$SPARK_HOME/bin/spark-submit
# Local runs (every run here) bind Spark to loopback unless SPARK_LOCAL_IP says otherwise.
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
# The training log reaches stdout through the program's progress listener; the native library's
# own INFO lines on stderr (the whole net, twice) would repeat it.
export CORTADO_LOG_LEVEL=${CORTADO_LOG_LEVEL:-warning}
spark_options=(--master 'local[2]' --driver-memory 3g
  --driver-java-options "-Dlog4j2.configurationFile=$PWD/$example/log4j2.properties")

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
output=$data/output.txt
"$submit" "${spark_options[@]}" --jars "$jar" --class io.cortado.examples.FashionMnistJava \
  "$example_jar" "file:$PWD/$train" "file:$PWD/$test" "$example/lenet_solver.prototxt" \
  "file:$PWD/$data" ${ITERATIONS:+"$ITERATIONS"} | tee "$output"

if [[ ${CHECK:-0} == 1 ]]; then
  min=${MIN_ACCURACY:-0.7}
  test_accuracy=$(sed -n 's/^Cortado\.testAsJava: .*accuracy = \([0-9.]*\).*/\1/p' "$output")
  pipeline_accuracy=$(sed -n 's/^Pipeline accuracy: \([0-9.]*\) .*/\1/p' "$output")
  read -r feature_rows test_rows < <(sed -n \
    's/^Cortado\.features: \([0-9]*\) rows of \([0-9]*\) test rows.*/\1 \2/p' "$output") || true
  failed=0
  for name in test_accuracy pipeline_accuracy; do
    value=${!name}
    if ! awk -v v="$value" -v m="$min" 'BEGIN { exit !(v != "" && v + 0 >= m + 0) }'; then
      echo "CHECK: $name '$value' is below $min" >&2
      failed=1
    fi
  done
  if [[ -z ${feature_rows:-} || $feature_rows != "$test_rows" || $test_rows -eq 0 ]]; then
    echo "CHECK: features gave '${feature_rows:-}' rows for '${test_rows:-}' test rows" >&2
    failed=1
  fi
  if ((failed)); then exit 1; fi
  echo "CHECK: passed (test accuracy $test_accuracy, pipeline accuracy $pipeline_accuracy," \
    "$feature_rows feature rows; floor $min)"
fi
