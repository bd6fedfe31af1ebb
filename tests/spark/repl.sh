#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cortado in Spark's Scala shell (spark-shell), as a notebook or a user at the prompt drives it:
# scala-bridge/bin/spark-shell (Spark's REPL from the Maven dependencies, through
# scala-bridge/bin/spark-submit; $SPARK_HOME/bin/spark-shell when SPARK_HOME is set) with
# --master local-cluster[WORKERS,1,1024] (executor JVMs) and --jars Cortado's jar, typing
# tests/spark/repl_session.scala into it line by line. The session reads the demo's Parquet
# (examples/spark-fashion-mnist), defines and registers a progress listener class, trains the
# demo's LeNet for ITERATIONS iterations on WORKERS workers (batch 64/WORKERS each), tests it,
# extracts features, and runs a closure over values, a function and a case class of the
# session on the executors. Checked from its "REPL_RESULT" lines: the row counts, the listener
# saw the display iterations up to the last, accuracy >= THRESHOLD, one feature row per test
# row, the closure ran on executors (not the driver) and agrees with the same count made in
# the driver, which agrees with the test accuracy. The session ends with sys.exit(0), not
# :quit: Spark 3.5 before 3.5.6 leaves a non-daemon thread once a barrier stage has run
# (SPARK-51450), and the shell's JVM would not end.
# Prints the result lines and "repl: PASS" (exit status 0) or "repl: FAIL: <why>" with the end
# of the shell's output and log (exit status 1); the whole shell is bounded by TIMEOUT seconds.
# Every process it starts goes on exit, failure and Ctrl-C included.
#
# Run from anywhere:
#   bash tests/spark/repl.sh
#   CORTADO_JAR=/path/to/cortado.jar ITERATIONS=1000 bash tests/spark/repl.sh
# Settings (environment):
#   CORTADO_JAR=            the jar (default scala-bridge/target/cortado-<version>.jar)
#   ITERATIONS=400          max_iter of the demo's solver (display every 100)
#   THRESHOLD=0.78          least test accuracy, for 400 iterations (2 workers: 0.832-0.836 in
#                           six runs here)
#   WORKERS=2               executors of the local cluster and -clusterSize (divides 64)
#   TIMEOUT=600             seconds the shell may take (then it is killed: a FAIL)
#   DATA_DIR=examples/spark-fashion-mnist/data   fashion_mnist_{train,test}.parquet; converted
#                           there from FASHION_MNIST_DIR with io.cortado.data.IdxToParquet, as
#                           the demo's run.sh does, when missing
#   FASHION_MNIST_DIR=/usr/share/datasets/fashion-mnist   (apt-get install dataset-fashion-mnist)
#   SPARK_LOCAL_IP=127.0.0.1   the driver and executors bind to it (loopback by default)
#   KEEP=1                  keep the run's folder (shell output, log, solver, model); a FAIL
#                           keeps it too
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NAME=repl
EXAMPLE=$ROOT/examples/spark-fashion-mnist
SESSION=$ROOT/tests/spark/repl_session.scala
ITERATIONS=${ITERATIONS:-400}
THRESHOLD=${THRESHOLD:-0.78}
WORKERS=${WORKERS:-2}
TIMEOUT=${TIMEOUT:-600}
DATA_DIR=${DATA_DIR:-$EXAMPLE/data}
FASHION_MNIST_DIR=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
KEEP=${KEEP:-0}
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}

if [[ -n ${SPARK_HOME:-} ]]; then
  SUBMIT=$SPARK_HOME/bin/spark-submit
  SHELL_CMD=$SPARK_HOME/bin/spark-shell
else
  SUBMIT=$ROOT/scala-bridge/bin/spark-submit
  SHELL_CMD=$ROOT/scala-bridge/bin/spark-shell
fi

WORK=""
PID=""

fail() {
  printf '%s: FAIL: %s\n' "$NAME" "$*"
  exit 1
}

# A process and all its descendants, by parent id.
descendants() {  # pid
  local child
  echo "$1"
  for child in $(pgrep -P "$1" 2>/dev/null); do descendants "$child"; done
}

# The running command (timeout, the shell's JVM, the executor JVMs it started) and the folder.
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local rc=$? pid i
  trap - EXIT INT TERM
  if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
    local -a all
    mapfile -t all < <(descendants "$PID")
    for pid in "${all[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for ((i = 0; i < 50; i++)); do
      local alive=0
      for pid in "${all[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
      ((alive)) || break
      sleep 0.1
    done
    for pid in "${all[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  fi
  if [[ -n $WORK && -d $WORK ]]; then
    if [[ $KEEP == 1 ]]; then echo "# kept: $WORK"; else rm -rf "$WORK"; fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs a command in the background under `timeout` (so that the trap can end it), waiting;
# standard input from `in`, output to `out`, errors to `err`.
run_bounded() {  # seconds in out err command...
  local seconds=$1 in=$2 out=$3 err=$4
  shift 4
  timeout -k 10 "$seconds" "$@" <"$in" >"$out" 2>"$err" &
  PID=$!
  wait "$PID"
  local rc=$?
  PID=""
  return "$rc"
}

for n in ITERATIONS WORKERS TIMEOUT; do
  [[ ${!n} =~ ^[0-9]+$ && ${!n} -gt 0 ]] || fail "$n=${!n}: a positive integer"
done
((64 % WORKERS == 0)) || fail "WORKERS=$WORKERS: the total batch 64 must divide evenly"
[[ $THRESHOLD =~ ^[0-9]*\.?[0-9]+$ ]] || fail "THRESHOLD=$THRESHOLD: a number"
command -v java >/dev/null || fail "no java on PATH"

if [[ -z ${CORTADO_JAR:-} ]]; then
  for f in "$ROOT"/scala-bridge/target/cortado-*.jar; do
    # cortado-0.1.0-SNAPSHOT.jar, not -tests, -sources or another classifier
    [[ ${f##*/} =~ ^cortado-[0-9][0-9A-Za-z.]*(-SNAPSHOT)?\.jar$ ]] && CORTADO_JAR=$f && break
  done
fi
[[ -f ${CORTADO_JAR:-} ]] ||
  fail "no Cortado jar: build it (mvn -f scala-bridge/pom.xml package) or set CORTADO_JAR"
CORTADO_JAR=$(cd "$(dirname "$CORTADO_JAR")" && pwd)/${CORTADO_JAR##*/}

WORK=$(mktemp -d /tmp/cortado-repl.XXXXXX)
cat >"$WORK/log4j2.properties" <<'EOF'
# Spark's warnings and Cortado's training log on stderr.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
logger.cortado.name = io.cortado
logger.cortado.level = info
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
EOF
java_options="-Dlog4j2.configurationFile=$WORK/log4j2.properties -Djava.io.tmpdir=$WORK"

# The demo's Parquet, converted as examples/spark-fashion-mnist/run.sh converts it, into a
# folder of its own first so that a concurrent run never sees half of it.
DATA_DIR=$(mkdir -p "$DATA_DIR" && cd "$DATA_DIR" && pwd)
if [[ ! -f $DATA_DIR/fashion_mnist_train.parquet/_SUCCESS ||
  ! -f $DATA_DIR/fashion_mnist_test.parquet/_SUCCESS ]]; then
  d=$FASHION_MNIST_DIR
  [[ -f $d/train-images-idx3-ubyte.gz ]] ||
    fail "Fashion-MNIST not found in $d: apt-get install dataset-fashion-mnist"
  echo "# converting Fashion-MNIST to Parquet in $DATA_DIR (io.cortado.data.IdxToParquet)"
  tmp=$(mktemp -d "$DATA_DIR/.convert.XXXXXX")
  if ! run_bounded 600 /dev/null "$WORK/convert.out" "$WORK/convert.log" \
    "$SUBMIT" --master 'local[2]' --driver-memory 2g --driver-java-options "$java_options" \
    --conf spark.ui.enabled=false \
    --class io.cortado.data.IdxToParquet "$CORTADO_JAR" \
    "$d/train-images-idx3-ubyte.gz" "$d/train-labels-idx1-ubyte.gz" \
    "$tmp/fashion_mnist_train.parquet" \
    "$d/t10k-images-idx3-ubyte.gz" "$d/t10k-labels-idx1-ubyte.gz" \
    "$tmp/fashion_mnist_test.parquet"; then
    tail -n 20 "$WORK/convert.log"
    rm -rf "$tmp"
    fail "converting Fashion-MNIST failed (log above)"
  fi
  for set in train test; do
    rm -rf "$DATA_DIR/fashion_mnist_$set.parquet"
    mv "$tmp/fashion_mnist_$set.parquet" "$DATA_DIR/"
  done
  rm -rf "$tmp"
fi

# The demo's net and solver with batch 64/WORKERS per worker (as run.sh makes them) and
# max_iter ITERATIONS.
sed "0,/batch_size: 64/s//batch_size: $((64 / WORKERS))/" \
  "$EXAMPLE/lenet_cos_train_test.prototxt" >"$WORK/net.prototxt"
sed -e "s|^net: .*|net: \"$WORK/net.prototxt\"|" -e "s|^max_iter: .*|max_iter: $ITERATIONS|" \
  "$EXAMPLE/lenet_cos_solver.prototxt" >"$WORK/solver.prototxt"

echo "# $SHELL_CMD --master local-cluster[$WORKERS,1,1024] --jars $CORTADO_JAR" \
  "< ${SESSION#"$ROOT"/}"
start=$SECONDS
# The shell's working directory is the run's folder (spark-warehouse and the like go there).
cd "$WORK" || fail "cd $WORK"
export REPL_WORK=$WORK REPL_DATA=$DATA_DIR REPL_WORKERS=$WORKERS
run_bounded "$TIMEOUT" "$SESSION" "$WORK/shell.out" "$WORK/shell.log" "$SHELL_CMD" \
  --master "local-cluster[$WORKERS,1,1024]" --driver-memory 1g --executor-memory 1g \
  --executor-cores 1 --driver-java-options "$java_options" --conf spark.ui.port=0 \
  --conf spark.ui.showConsoleProgress=false --jars "$CORTADO_JAR"
rc=$?
seconds=$((SECONDS - start))
# The shell echoes the lines typed; what the session printed starts a line.
grep '^REPL_RESULT ' "$WORK/shell.out"
echo "# the shell took $seconds s (exit status $rc)"

results=$(grep '^REPL_RESULT ' "$WORK/shell.out")
value() {  # key: its value in the first result line that has it
  grep -o -m1 " $1=[^ ]*" <<<"$results" | cut -d= -f2
}
# Whether a >= b, and |a - b| <= tolerance (numbers as printed; empty is neither).
at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b + 0) }'; }
near() {
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; exit !(a != "" && d <= t && -d <= t) }'
}
train=$(value train) test=$(value test) displays=$(value displays) last=$(value last)
accuracy=$(value accuracy) features=$(value features) rows=$(value rows)
executors=$(value executors) correct=$(value correct) confident=$(value confident)
# A line the shell could not compile or run (it goes on with the next): the first one.
errors='^<console>:[0-9]+: error|^[a-zA-Z.]*(Exception|Error)\b'
first_error=$(grep -m1 -E "$errors" "$WORK/shell.out")
why=""
if ((rc == 124 || rc == 137)); then
  why="the shell ran past TIMEOUT=$TIMEOUT s and was killed"
elif ((rc != 0)); then
  why="the shell exited with status $rc"
elif ! grep -q '^REPL_RESULT done' "$WORK/shell.out"; then
  why="the session did not reach its end"
elif [[ -n $first_error ]]; then
  why="a line of the session failed: $first_error"
elif [[ $train != 60000 || $test != 10000 ]]; then
  why="rows: train=$train test=$test, not 60000 and 10000"
elif [[ $last != "$ITERATIONS" ]] || ! at_least "$displays" 2; then
  why="the listener saw $displays displays, the last at iteration $last, not $ITERATIONS"
elif ! at_least "$accuracy" "$THRESHOLD"; then
  why="accuracy $accuracy below THRESHOLD=$THRESHOLD"
elif [[ $features != "$test" ]]; then
  why="$features feature rows for $test test rows"
elif [[ $rows != "$test" ]]; then
  why="the closure returned $rows rows for $test test rows"
elif [[ -z $executors || ,$executors, == *,driver,* ]]; then
  why="the closure ran on '$executors', not on executors only"
elif [[ $correct != "$(value driver_correct)" ]]; then
  why="the closure counted $correct right, the driver $(value driver_correct)"
elif [[ $confident != "$(value driver_confident)" ]]; then
  why="the closure counted $confident confident, the driver $(value driver_confident)"
elif ! near "$(value feature_accuracy)" "$accuracy" 0.0002; then
  why="accuracy from the features $(value feature_accuracy), from test() $accuracy"
fi
if [[ -n $why ]]; then
  echo "# the shell's errors, then the end of its output ($WORK/shell.out) and log (shell.log):"
  grep -E -A3 "$errors" "$WORK/shell.out" | head -n 30 | sed 's/^/  /'
  tail -n 15 "$WORK/shell.out" | sed 's/^/  /'
  tail -n 25 "$WORK/shell.log" | sed 's/^/  /'
  KEEP=1
  fail "$why"
fi
echo "$NAME: PASS"
