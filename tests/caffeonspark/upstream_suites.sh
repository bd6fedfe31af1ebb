#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CaffeOnSpark's own Scala test suites (caffe-grid/src/test/scala in yahoo/CaffeOnSpark) run
# against Cortado's jar, in a folder outside the project, with only their imports changed:
# `com.yahoo.ml.caffe` becomes `io.cortado.caffeonspark` (package lines and imports), and the
# import of `com.yahoo.ml.jcaffe._` (CaffeOnSpark's low-level net API, which Cortado does not
# offer) is dropped where the suite does not use it. Nothing else in them changes.
#
# The folder is laid out as CaffeOnSpark's repository (the suites find their resources from
# there): caffe-grid/ with the suites, their resources and a Maven pom of its own (Scala 2.12,
# ScalaTest 3.0 for the suites' org.scalatest.FunSuite, TestNG for their asserts, Spark 3.5 and
# Cortado's jar), and data/ with CaffeOnSpark's sample images and, where the suites read MNIST
# (data/mnist_train_lmdb), Fashion-MNIST converted by `cortado convert_idx`.
#
# Run from anywhere, after the jar is built (mvn -f scala-bridge/pom.xml package):
#   bash tests/caffeonspark/upstream_suites.sh [SUITE...]
# SUITE: DataFrameTest, InterleaveTest, ToolTest, SourceTest (default: the first three;
# SourceTest drives com.yahoo.ml.jcaffe.CaffeNet, CaffeOnSpark's low-level net API, which the
# jar does not have: named, it is tried and fails to compile).
# Settings (environment):
#   CAFFEONSPARK=    a CaffeOnSpark checkout (a work tree or a bare git directory); default:
#                    cloned from https://github.com/yahoo/CaffeOnSpark into the work folder
#   CORTADO_JAR=     the jar (default scala-bridge/target/cortado-<version>.jar)
#   BUILD_DIR=build  the C++ build (its cortado tool converts Fashion-MNIST)
#   FASHION_MNIST_DIR=/usr/share/datasets/fashion-mnist
#   WORK=            the folder (default a new one under /tmp, removed at the end unless KEEP=1)
# Prints each suite's ScalaTest report and exits with Maven's status.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
FASHION_MNIST_DIR=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
KEEP=${KEEP:-0}
suites=("$@")
((${#suites[@]})) || suites=(DataFrameTest InterleaveTest ToolTest)

if [[ -z ${CORTADO_JAR:-} ]]; then
  for f in "$ROOT"/scala-bridge/target/cortado-*.jar; do
    [[ ${f##*/} =~ ^cortado-[0-9][0-9A-Za-z.]*(-SNAPSHOT)?\.jar$ ]] && CORTADO_JAR=$f && break
  done
fi
[[ -f ${CORTADO_JAR:-} ]] || { echo "no Cortado jar: mvn -f scala-bridge/pom.xml package" >&2; exit 1; }
[[ -x $BUILD_DIR/cpp/tools/cortado ]] || { echo "no $BUILD_DIR/cpp/tools/cortado: build first" >&2; exit 1; }
[[ -f $FASHION_MNIST_DIR/train-images-idx3-ubyte.gz ]] ||
  { echo "Fashion-MNIST not in $FASHION_MNIST_DIR: apt-get install dataset-fashion-mnist" >&2; exit 1; }

made_work=0
if [[ -z ${WORK:-} ]]; then
  WORK=$(mktemp -d /tmp/caffeonspark-suites.XXXXXX)
  made_work=1
fi
cleanup() {
  if ((made_work)) && [[ $KEEP != 1 ]]; then rm -rf "$WORK"; else echo "# kept: $WORK"; fi
}
trap cleanup EXIT

# CaffeOnSpark's test sources, resources and sample data, from the checkout.
if [[ -z ${CAFFEONSPARK:-} ]]; then
  CAFFEONSPARK=$WORK/CaffeOnSpark.git
  git clone -q --bare https://github.com/yahoo/CaffeOnSpark "$CAFFEONSPARK"
fi
if [[ -d $CAFFEONSPARK/.git || -f $CAFFEONSPARK/caffe-grid/pom.xml ]]; then
  (cd "$CAFFEONSPARK" && tar -cf - caffe-grid/src/test data/images) | (cd "$WORK" && tar -xf -)
else
  git -C "$CAFFEONSPARK" archive HEAD caffe-grid/src/test data/images | tar -x -C "$WORK"
fi
rev=$(git -C "$CAFFEONSPARK" rev-parse --short HEAD 2>/dev/null || echo "?")
echo "# CaffeOnSpark $rev suites in $WORK"

# Only the imports change.
tests=$WORK/caffe-grid/src/test/scala
find "$tests" -name '*.scala' -print0 | while IFS= read -r -d '' f; do
  sed -i -e 's/^package com\.yahoo\.ml\.caffe/package io.cortado.caffeonspark/' \
    -e 's/^import com\.yahoo\.ml\.caffe\./import io.cortado.caffeonspark./' "$f"
  # The jcaffe import, where nothing of jcaffe is used.
  if ! grep -Eq '\b(CaffeNet|FloatBlob|MatVector|FloatDataTransformer|Mat)\b' "$f"; then
    sed -i '/^import com\.yahoo\.ml\.jcaffe\._$/d' "$f"
  fi
done
mkdir -p "$tests/io/cortado/caffeonspark/tools"
for s in DataFrameTest InterleaveTest SourceTest; do
  mv "$tests/com/yahoo/ml/caffe/$s.scala" "$tests/io/cortado/caffeonspark/"
done
mv "$tests/com/yahoo/ml/caffe/tools/ToolTest.scala" "$tests/io/cortado/caffeonspark/tools/"
rm -rf "$tests/com"
# Only the suites asked for are compiled.
for s in DataFrameTest InterleaveTest SourceTest ToolTest; do
  [[ " ${suites[*]} " == *" $s "* ]] && continue
  find "$tests" -name "$s.scala" -delete
done

# MNIST's place, with Fashion-MNIST (the suites' nets read file:../data/mnist_train_lmdb/).
"$BUILD_DIR/cpp/tools/cortado" convert_idx --images="$FASHION_MNIST_DIR/train-images-idx3-ubyte.gz" \
  --labels="$FASHION_MNIST_DIR/train-labels-idx1-ubyte.gz" --out="$WORK/data/mnist_train_lmdb" \
  >/dev/null
"$BUILD_DIR/cpp/tools/cortado" convert_idx --images="$FASHION_MNIST_DIR/t10k-images-idx3-ubyte.gz" \
  --labels="$FASHION_MNIST_DIR/t10k-labels-idx1-ubyte.gz" --out="$WORK/data/mnist_test_lmdb" \
  >/dev/null

cat >"$WORK/caffe-grid/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local</groupId>
  <artifactId>caffeonspark-suites</artifactId>
  <version>1</version>
  <properties>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <!-- As Cortado's own build pins them (Avro, through Spark, would pull older ones). -->
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>org.slf4j</groupId>
        <artifactId>slf4j-api</artifactId>
        <version>2.0.7</version>
      </dependency>
      <dependency>
        <groupId>com.fasterxml.jackson.core</groupId>
        <artifactId>jackson-core</artifactId>
        <version>2.15.2</version>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>io.cortado</groupId>
      <artifactId>cortado</artifactId>
      <version>1</version>
      <scope>system</scope>
      <systemPath>$CORTADO_JAR</systemPath>
    </dependency>
    <dependency>
      <groupId>org.scala-lang</groupId>
      <artifactId>scala-library</artifactId>
      <version>2.12.18</version>
    </dependency>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-sql_2.12</artifactId>
      <version>3.5.5</version>
    </dependency>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-mllib_2.12</artifactId>
      <version>3.5.5</version>
    </dependency>
    <dependency>
      <groupId>org.scalatest</groupId>
      <artifactId>scalatest_2.12</artifactId>
      <version>3.0.9</version>
      <scope>test</scope>
    </dependency>
    <dependency>
      <groupId>org.testng</groupId>
      <artifactId>testng</artifactId>
      <version>7.5.1</version>
      <scope>test</scope>
    </dependency>
    <dependency>
      <groupId>commons-io</groupId>
      <artifactId>commons-io</artifactId>
      <version>2.16.1</version>
      <scope>test</scope>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>net.alchim31.maven</groupId>
        <artifactId>scala-maven-plugin</artifactId>
        <version>4.9.2</version>
        <executions>
          <execution>
            <goals>
              <goal>testCompile</goal>
            </goals>
          </execution>
        </executions>
        <configuration>
          <scalaVersion>2.12.18</scalaVersion>
        </configuration>
      </plugin>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-surefire-plugin</artifactId>
        <version>3.2.5</version>
        <configuration>
          <skipTests>true</skipTests>
        </configuration>
      </plugin>
      <plugin>
        <groupId>org.scalatest</groupId>
        <artifactId>scalatest-maven-plugin</artifactId>
        <version>2.2.0</version>
        <configuration>
          <stdout>W</stdout>
          <argLine>-Xmx3g --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED</argLine>
          <environmentVariables>
            <SPARK_LOCAL_IP>127.0.0.1</SPARK_LOCAL_IP>
          </environmentVariables>
        </configuration>
        <executions>
          <execution>
            <id>test</id>
            <goals>
              <goal>test</goal>
            </goals>
          </execution>
        </executions>
      </plugin>
    </plugins>
  </build>
</project>
EOF

echo "# suites: ${suites[*]}"
cd "$WORK/caffe-grid"
mvn -B -q test
