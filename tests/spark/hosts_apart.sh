#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End to end: a real Spark standalone cluster whose Workers live on separate "hosts" made of Linux
# network namespaces, training through Cortado's CaffeOnSpark command line (CortadoOnSpark).
#
#   hosts      namespaces cthost1..N, host K at 10.214.0.K on veth cthostK-n, joined by veth
#              cthostK-h to the bridge ctbr0 (10.214.0.254) in the root namespace; both
#              directions of every link shaped with tbf at RATE (tests/spark/netns_lib.sh)
#   Master     in the root namespace, bound to the bridge address: spark://10.214.0.254:7177
#   Workers    one per host cthost1..cthostHOSTS (--cores 1, SPARK_LOCAL_IP and -h the host's
#              address, an empty SPARK_HOME of its own); the executor JVMs they start stay in
#              their host's namespace
#   driver     scala-bridge/bin/spark-submit --deploy-mode client in the root namespace, on the
#              bridge address (spark.driver.host, spark.driver.bindAddress)
#   slots      the slots scenario's own cluster: a Master at spark://10.214.0.254:7178 and two
#              one-core Workers on the next two hosts (cthost3, cthost4 with HOSTS=2)
# Spark comes from the Maven dependencies (scala-bridge/target/spark-classpath.txt, made as
# scala-bridge/bin/spark-submit makes it): no Spark installation. The executors get
# SPARK_TESTING=1, SPARK_SCALA_VERSION=2.12 and SPARK_DIST_CLASSPATH (spark.executorEnv.*) as
# Spark's own local-cluster tests do. Data and models are file: paths in the run's folder, which
# every namespace sees.
#
# Scenarios (SCENARIOS), each ending in a PASS or FAIL line (a FAIL with the tails of the
# driver's and executors' logs); then the line "hosts_apart: N passed, N failed", and exit
# status 1 if any failed:
#   demo    -clusterSize WORKERS trains LeNet on Fashion-MNIST (the net and solver of
#           examples/spark-fashion-mnist, batch 64/WORKERS per worker, max_iter ITERATIONS) and
#           tests it (-train -test); passes when the printed accuracy >= THRESHOLD. Prints the
#           seconds per iteration: Cortado's "Trained N iterations in S s of training" (S/N; the
#           test passes during training count, snapshot writing does not) and the mean of the
#           display lines' speed.
#   kill    trains KILL_ITERATIONS iterations with a snapshot every SNAPSHOT_EVERY; once the
#           first snapshot exists, kill -9 one executor JVM (CoarseGrainedExecutorBackend in a
#           host's namespace); passes when spark-submit exits 0 by itself, its log says the
#           training resumed from a snapshot (the driver's "Attempt 2 resumes from
#           .../lenet_iter_N.solverstate", or a task's "Spark runs this training again ...:
#           resuming from ...") and training reached its last iteration.
#   link    trains LINK_ITERATIONS iterations (snapshots as kill); once the driver's log shows
#           iteration >= LINK_DOWN_AT, sets the bridge end of an executor's host's veth down for
#           LINK_DOWN_SECONDS, then up; passes when spark-submit exits 0 within
#           LINK_DOWN_SECONDS + LINK_BOUND_EXTRA seconds of the link going down, whether it rode
#           the outage out or resumed from a snapshot (the PASS line says which, and the longest
#           gap between the driver's iteration lines)
#   elastic trains ELASTIC_ITERATIONS (a snapshot every ELASTIC_SNAPSHOT_EVERY, tested at the
#           end) with -minWorkers WORKERS-1 and spark.cortado.elasticTimeout=ELASTIC_WAIT; once
#           the driver's log shows a third of them, kill -9 the Worker and the executor JVM of a
#           host (the host is gone for good); with ELASTIC_RETURN=1 the Worker starts again
#           ELASTIC_RETURN_AFTER s after the driver goes on with one worker fewer. Passes when
#           spark-submit exits 0 by itself, the driver's log shows the run going on with
#           WORKERS-1 workers (and, with ELASTIC_RETURN=1, back to WORKERS), training reached
#           its last iteration and the accuracy is at least the demo's threshold for as many
#           iterations. ELASTIC_ITERATIONS=10000 ELASTIC_RETURN=0 SCENARIOS="demo elastic"
#           ITERATIONS=10000 compares it with the demo without a fault (bench/RESULTS.md).
#   slots   -clusterSize 3 on its own cluster of two one-core Workers: passes when spark-submit
#           exits non-zero (not by timeout) with Cortado's "training with 3 workers needs 3 task
#           slots at once ... but after SLOTS_WAIT s ... offers 2 (...)". That comes after
#           Cortado's wait for slots (spark.cortado.startTimeout=SLOTS_WAIT, default 20 s), so
#           it runs in the background beside kill and link, started once demo is done, and is
#           reported last.
#   local   not by default: the demo in --master local-cluster[WORKERS,1,1024] on loopback (no
#           namespaces, as examples/spark-fashion-mnist/run.sh runs it), for the ratio of seconds
#           per iteration: SCENARIOS="demo local"
# Skips (one line "hosts_apart: skipped: <reason>", exit status 0) when namespaces cannot be made
# (not root, no ip/tc, 'ip netns add' fails), or there is no java, no Fashion-MNIST or no jar.
# Everything it makes (namespaces, veths, bridge, qdiscs, every process in the namespaces, the
# Masters, the drivers, the run's folder unless KEEP=1) goes on exit, Ctrl-C and TERM included,
# and leftovers of an earlier run are removed first. One run at a time (a lock in /tmp).
#
# Run from anywhere, as root:
#   bash tests/spark/hosts_apart.sh                                  # CI's short run
#   ITERATIONS=10000 SCENARIOS=demo bash tests/spark/hosts_apart.sh  # the full demo (>= 0.89)
#   SCENARIOS="demo local" RATE=10gbit ITERATIONS=2000 bash tests/spark/hosts_apart.sh
#   SCENARIOS=demo BENCH_RATES="1gbit 10gbit none" bash tests/spark/hosts_apart.sh
#                            # demo once per rate, then a table of seconds per iteration
# Settings (environment):
#   HOSTS=2                 hosts of the main cluster, one Spark Worker each (2..9)
#   WORKERS=2               -clusterSize of demo, kill, link and local (<= HOSTS; divides 64)
#   RATE=1gbit              tbf rate of every link, both directions (tc units; "none": unshaped)
#   BENCH_RATES=            rates to run demo at, one run each, links reshaped between runs
#   ITERATIONS=400          max_iter of demo and local (the solver's test_interval 500 stays)
#   THRESHOLD=              demo's least accuracy (default: 0.89 from 10000 iterations, 0.75 from
#                           400, 0.65 from 200, else 0)
#   SCENARIOS="demo kill link elastic slots"   a subset of "demo kill link elastic slots local"
#   ELASTIC_ITERATIONS=1200 ELASTIC_SNAPSHOT_EVERY=100 ELASTIC_RETURN=1 ELASTIC_RETURN_AFTER=0
#   ELASTIC_HOST_LOST=0     elastic kills only the executor (its Worker starts another): the run,
#                           with -minWorkers WORKERS, resumes on as many workers (for comparison)
#   ELASTIC_WAIT=10 ELASTIC_SEED=1701   elastic's settings (see above; the seed is the solver's
#                           random_seed, so that a run with ELASTIC_KILL=0, the same without the
#                           fault, starts from the same weights)
#   KILL_ITERATIONS=500 LINK_ITERATIONS=500   max_iter of kill and link
#   SNAPSHOT_EVERY=100      snapshot interval of kill and link
#   LINK_DOWN_SECONDS=30 LINK_DOWN_AT=100 LINK_BOUND_EXTRA=240
#   JAR=                    Cortado's jar (default scala-bridge/target/cortado-<version>.jar, the
#                           one without a classifier); copied into the run's folder at the start
#   DATA_DIR=               a folder holding fashion_mnist_{train,test}.parquet to reuse (default:
#                           examples/spark-fashion-mnist/data when both are there; else they are
#                           converted into the run's folder with io.cortado.data.IdxToParquet)
#   FASHION_MNIST_DIR=/usr/share/datasets/fashion-mnist   (apt-get install dataset-fashion-mnist)
#   EXECUTOR_MEMORY=1g WORKER_MEMORY=1500m DRIVER_MEMORY=1g DAEMON_MEMORY=256m (Master, Worker)
#   MASTER_PORT=7177        the main Master's port (the slots cluster's: MASTER_PORT + 1)
#   SLOTS_WAIT=20           slots: spark.cortado.startTimeout, the driver's wait for the slots
#   RUN_TIMEOUT=            seconds one spark-submit may take (default 900 + 0.15 s per
#                           iteration of ITERATIONS; slots: 300)
#   KEEP=1                  keep the run's folder (logs, solvers, snapshots, models)
#   WORK_DIR=               the run's folder (default a new /tmp/cortado-hosts-apart.XXXXXX,
#                           removed at the end unless KEEP=1; a WORK_DIR that existed is kept)
#   TBF_LATENCY=50ms TBF_BURST=   tbf's queue limit and bucket (netns_lib.sh's defaults)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/spark
NAME=hosts_apart

HOSTS=${HOSTS:-2}
WORKERS=${WORKERS:-2}
RATE=${RATE:-1gbit}
BENCH_RATES=${BENCH_RATES:-}
DEFAULT_ITERATIONS=400
ITERATIONS=${ITERATIONS:-$DEFAULT_ITERATIONS}
THRESHOLD=${THRESHOLD:-}
SCENARIOS=${SCENARIOS:-demo kill link elastic slots}
KILL_ITERATIONS=${KILL_ITERATIONS:-500}
LINK_ITERATIONS=${LINK_ITERATIONS:-500}
SNAPSHOT_EVERY=${SNAPSHOT_EVERY:-100}
LINK_DOWN_SECONDS=${LINK_DOWN_SECONDS:-30}
LINK_DOWN_AT=${LINK_DOWN_AT:-100}
LINK_BOUND_EXTRA=${LINK_BOUND_EXTRA:-240}
ELASTIC_ITERATIONS=${ELASTIC_ITERATIONS:-1200}
ELASTIC_SNAPSHOT_EVERY=${ELASTIC_SNAPSHOT_EVERY:-100}
ELASTIC_RETURN=${ELASTIC_RETURN:-1}
ELASTIC_RETURN_AFTER=${ELASTIC_RETURN_AFTER:-0}
ELASTIC_WAIT=${ELASTIC_WAIT:-10}
ELASTIC_KILL=${ELASTIC_KILL:-1}
ELASTIC_HOST_LOST=${ELASTIC_HOST_LOST:-1}
ELASTIC_SEED=${ELASTIC_SEED:-1701}
JAR=${JAR:-}
DATA_DIR=${DATA_DIR:-}
FASHION_MNIST_DIR=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
EXECUTOR_MEMORY=${EXECUTOR_MEMORY:-1g}
WORKER_MEMORY=${WORKER_MEMORY:-1500m}
DRIVER_MEMORY=${DRIVER_MEMORY:-1g}
DAEMON_MEMORY=${DAEMON_MEMORY:-256m}
MASTER_PORT=${MASTER_PORT:-7177}
RUN_TIMEOUT=${RUN_TIMEOUT:-}
KEEP=${KEEP:-0}
WORK_DIR=${WORK_DIR:-}

NS_PREFIX=cthost
NS_BRIDGE=ctbr0
NS_NET=10.214.0
NS_TBF_LATENCY=${TBF_LATENCY:-50ms}
NS_TBF_BURST=${TBF_BURST:-}
# shellcheck source=tests/spark/netns_lib.sh
source "$HERE/netns_lib.sh"

BRIDGE_ADDR=$(ns_bridge_addr)
MASTER_URL=spark://$BRIDGE_ADDR:$MASTER_PORT
SLOTS_WORKERS=2                                # the slots scenario's cluster
SLOTS_PORT=""                                  # MASTER_PORT + 1
SLOTS_URL=""
NS_HOSTS=0                                     # namespaces made: HOSTS, then the slots cluster's
PIDFILE=/tmp/cortado-hosts-apart.$EUID.pids  # processes of the run in progress, by id
LOCKFILE=/tmp/cortado-hosts-apart.$EUID.lock
CLASSPATH_FILE=$ROOT/scala-bridge/target/spark-classpath.txt
SUBMIT=$ROOT/scala-bridge/bin/spark-submit
ALL_SCENARIOS="demo kill link elastic slots local"

say() { printf '%s\n' "$*"; }
note() { printf '# %s\n' "$*"; }
die() {
  printf '%s: %s\n' "$NAME" "$*" >&2
  exit 2
}
skip() {
  say "$NAME: skipped: $*"
  exit 0
}
# shellcheck disable=SC2317  # used by cleanup
flag_on() { [[ -n ${1:-} && ${1:-0} != 0 ]]; }

# Spark 3.5 on Java 17 needs these (as scala-bridge/bin/spark-submit gives them).
JAVA_OPTS=(-XX:+IgnoreUnrecognizedVMOptions
  --add-opens=java.base/java.lang=ALL-UNNAMED
  --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED
  --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens=java.base/sun.nio.cs=ALL-UNNAMED
  --add-opens=java.base/sun.security.action=ALL-UNNAMED
  --add-opens=java.base/sun.util.calendar=ALL-UNNAMED
  -Djdk.reflect.useDirectMethodHandle=false
  -Dio.netty.tryReflectionSetAccessible=true)

# ---------------------------------------------------------------------------------------------
# Our processes and the cleanup.

declare -a OUR_PIDS=()
WORK=""
WORK_CREATED=0

track_pid() {
  OUR_PIDS+=("$1")
  echo "$1" >>"$PIDFILE"
}

# A process and all its descendants, by parent id.
descendants() {  # pid
  local child
  echo "$1"
  for child in $(pgrep -P "$1" 2>/dev/null); do descendants "$child"; done
}

# Whether a pid an earlier run wrote to the pid file is still one of ours: its command line is one
# this script starts (the Master on the bridge address, a driver on it, the conversion or a
# driver with the jar in a run folder, timeout around them).
ours() {  # pid
  local cmd
  [[ $1 =~ ^[0-9]+$ && -r /proc/$1/cmdline ]] || return 1
  cmd=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)
  case $cmd in
    *org.apache.spark.deploy.*"$BRIDGE_ADDR"* | *spark-submit*"$BRIDGE_ADDR"* | \
      *spark-submit*/cortado-hosts-apart.* | *SparkSubmit*/cortado-hosts-apart.*) return 0 ;;
  esac
  return 1
}

kill_our_pids() {
  local pid waited=0
  local -a pids=() all=()
  # This run's (still running: a child of this shell), then an earlier run's that are still ours.
  for pid in "${OUR_PIDS[@]}"; do
    [[ $(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ') == "$$" ]] && pids+=("$pid")
  done
  if [[ -f $PIDFILE ]]; then
    while read -r pid; do
      [[ " ${OUR_PIDS[*]} " == *" $pid "* ]] || ! ours "$pid" || pids+=("$pid")
    done <"$PIDFILE"
  fi
  for pid in "${pids[@]}"; do
    mapfile -t -O "${#all[@]}" all < <(descendants "$pid")
  done
  if ((${#all[@]})); then
    for pid in "${all[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    while ((waited < 50)); do
      local alive=0
      for pid in "${all[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
      ((alive)) || break
      sleep 0.1
      waited=$((waited + 1))
    done
    for pid in "${all[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  fi
  rm -f "$PIDFILE"
}

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  kill_our_pids
  ns_remove_all 3
  if [[ -n $WORK && -d $WORK ]]; then
    if flag_on "$KEEP" || ((!WORK_CREATED)); then
      note "kept: $WORK"
    else
      rm -rf "$WORK"
    fi
  fi
  exit "$rc"
}

# ---------------------------------------------------------------------------------------------
# Requirements.

find_jar() {
  local f name
  for f in "$ROOT"/scala-bridge/target/cortado-*.jar; do
    name=${f##*/}
    # cortado-0.1.0-SNAPSHOT.jar, not -tests, -sources, -javadoc or original-...
    if [[ -f $f && $name =~ ^cortado-[0-9][0-9A-Za-z.]*(-SNAPSHOT)?\.jar$ ]]; then
      echo "$f"
      return 0
    fi
  done
  return 1
}

# The Spark + Hadoop client + Scala classpath, made as scala-bridge/bin/spark-submit makes it.
ensure_classpath() {
  if [[ ! -s $CLASSPATH_FILE || $ROOT/scala-bridge/pom.xml -nt $CLASSPATH_FILE ]]; then
    command -v mvn >/dev/null 2>&1 || return 1
    mkdir -p "$ROOT/scala-bridge/target"
    note "writing $CLASSPATH_FILE (mvn dependency:build-classpath)"
    local log
    log=$(mktemp /tmp/cortado-hosts-apart-mvn.XXXXXX)
    if ! mvn -B -q -f "$ROOT/scala-bridge/pom.xml" dependency:build-classpath \
      -DincludeScope=compile -Dmdep.outputFile="$CLASSPATH_FILE" >"$log" 2>&1; then
      tail -n 20 "$log" >&2
      rm -f "$log"
      return 1
    fi
    rm -f "$log"
    # Maven leaves an unchanged file as it was: newer than the pom now, or bin/spark-submit would
    # run Maven again for every spark-submit.
    touch "$CLASSPATH_FILE"
  fi
  [[ -s $CLASSPATH_FILE ]]
}

check_settings() {
  if [[ ! $HOSTS =~ ^[0-9]+$ ]] || ((HOSTS < 2 || HOSTS > 9)); then die "HOSTS=$HOSTS: 2 to 9"; fi
  if [[ ! $WORKERS =~ ^[0-9]+$ ]] || ((WORKERS < 1 || WORKERS > HOSTS)); then
    die "WORKERS=$WORKERS: 1 to HOSTS ($HOSTS)"
  fi
  ((64 % WORKERS == 0)) || die "WORKERS=$WORKERS: the total batch 64 must divide evenly"
  local n
  [[ ! $ITERATIONS =~ ^[0-9]+$ || -n $RUN_TIMEOUT ]] || RUN_TIMEOUT=$((900 + 3 * ITERATIONS / 20))
  for n in ITERATIONS KILL_ITERATIONS LINK_ITERATIONS SNAPSHOT_EVERY LINK_DOWN_SECONDS \
    LINK_DOWN_AT LINK_BOUND_EXTRA MASTER_PORT RUN_TIMEOUT ELASTIC_ITERATIONS \
    ELASTIC_SNAPSHOT_EVERY ELASTIC_WAIT; do
    [[ ${!n} =~ ^[0-9]+$ && ${!n} -gt 0 ]] || die "$n=${!n}: a positive integer"
  done
  ((MASTER_PORT < 65535)) || die "MASTER_PORT=$MASTER_PORT: below 65535"
  SLOTS_PORT=$((MASTER_PORT + 1))
  SLOTS_URL=spark://$BRIDGE_ADDR:$SLOTS_PORT
  ((SNAPSHOT_EVERY < KILL_ITERATIONS)) || die "SNAPSHOT_EVERY must be below KILL_ITERATIONS"
  ((LINK_DOWN_AT < LINK_ITERATIONS)) || die "LINK_DOWN_AT must be below LINK_ITERATIONS"
  [[ $ELASTIC_RETURN_AFTER =~ ^[0-9]+$ ]] || die "ELASTIC_RETURN_AFTER: a number of seconds"
  [[ $ELASTIC_RETURN == 0 || $ELASTIC_RETURN == 1 ]] || die "ELASTIC_RETURN: 0 or 1"
  [[ $ELASTIC_KILL == 0 || $ELASTIC_KILL == 1 ]] || die "ELASTIC_KILL: 0 or 1"
  [[ $ELASTIC_HOST_LOST == 0 || $ELASTIC_HOST_LOST == 1 ]] || die "ELASTIC_HOST_LOST: 0 or 1"
  [[ $ELASTIC_SEED =~ ^[0-9]+$ ]] || die "ELASTIC_SEED: a number"
  [[ " $SCENARIOS " != *" elastic "* ]] || ((WORKERS >= 2)) || die "elastic needs WORKERS >= 2"
  local s
  for s in $SCENARIOS; do
    [[ " $ALL_SCENARIOS " == *" $s "* ]] || die "SCENARIOS: unknown '$s' (of: $ALL_SCENARIOS)"
  done
  local rate
  for rate in $RATE $BENCH_RATES; do
    [[ $rate == none ]] || ns_rate_bps "$rate" >/dev/null || die "not a tc rate: '$rate'"
  done
  [[ -z $THRESHOLD || $THRESHOLD =~ ^[0-9]*\.?[0-9]+$ ]] || die "THRESHOLD=$THRESHOLD: a number"
}

demo_threshold() {  # iterations
  if [[ -n $THRESHOLD ]]; then echo "$THRESHOLD"
  elif (($1 >= 10000)); then echo 0.89
  elif (($1 >= 400)); then echo 0.75
  elif (($1 >= 200)); then echo 0.65
  else echo 0
  fi
}

# ---------------------------------------------------------------------------------------------
# The cluster.

# The java command line of a Spark daemon (Master, Worker): a small heap, little JIT.
DAEMON_JAVA=()
daemon_java_command() {
  DAEMON_JAVA=(java "${JAVA_OPTS[@]}" "-Xmx$DAEMON_MEMORY" -XX:+UseSerialGC
    -XX:TieredStopAtLevel=1 "-Djava.io.tmpdir=$WORK/tmp" -cp "$CP")
}

# Waits up to `seconds` for a file to contain a pattern (grep -E); fails if `pid` ends first.
wait_for_line() {  # file pattern seconds pid
  local file=$1 pattern=$2 limit=$(($3 * 5)) pid=$4 i=0
  while ((i < limit)); do
    grep -qE -- "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
    i=$((i + 1))
  done
  return 1
}

# A cluster: a Master in the root namespace on the bridge address, one Worker (1 core) per host
# given, each in its host's namespace with an empty SPARK_HOME of its own; logs in dir/master.log
# and dir/hostK/worker.log, executors' work folders in dir/hostK/spark-home/work. Started without
# waiting (launch_cluster), then awaited (await_cluster) so that two clusters start together.
declare -A CLUSTER_MASTER=()   # dir -> the Master's pid
declare -A CLUSTER_WORKERS=()  # dir -> "k:pid k:pid ..."

launch_cluster() {  # dir port hosts...
  local dir=$1 port=$2 k
  shift 2
  mkdir -p "$dir"
  daemon_java_command
  (cd "$dir" && exec env -u SPARK_HOME SPARK_LOCAL_IP="$BRIDGE_ADDR" SPARK_LOCAL_DIRS="$dir" \
    "${DAEMON_JAVA[@]}" org.apache.spark.deploy.master.Master --host "$BRIDGE_ADDR" \
    --port "$port" --webui-port 0) >"$dir/master.log" 2>&1 </dev/null &
  CLUSTER_MASTER[$dir]=$!
  track_pid $!
  CLUSTER_WORKERS[$dir]=""
  for k in "$@"; do start_worker "$dir" "$port" "$k"; done
  note "Spark Master at spark://$BRIDGE_ADDR:$port (root namespace), Workers (1 core," \
    "$WORKER_MEMORY) on $(for k in "$@"; do printf '%s ' "$(ns_name "$k"):$(ns_addr "$k")"; done)"
}

# One Worker (1 core) on host k for the Master of dir at port, logging to dir/hostK/worker.log
# (appended: a Worker started again keeps the earlier one's log).
start_worker() {  # dir port k
  local dir=$1 port=$2 k=$3 ns addr home pid
  ns=$(ns_name "$k")
  addr=$(ns_addr "$k")
  home=$dir/host$k/spark-home
  mkdir -p "$home/work" "$dir/host$k/local"
  daemon_java_command
  (cd "$dir/host$k" && exec ip netns exec "$ns" env -u SPARK_HOME SPARK_HOME="$home" \
    SPARK_LOCAL_IP="$addr" SPARK_LOCAL_DIRS="$dir/host$k/local" \
    "${DAEMON_JAVA[@]}" org.apache.spark.deploy.worker.Worker --host "$addr" --cores 1 \
    --memory "$WORKER_MEMORY" --webui-port 0 --work-dir "$home/work" \
    "spark://$BRIDGE_ADDR:$port") >>"$dir/host$k/worker.log" 2>&1 </dev/null &
  pid=$!
  track_pid "$pid"
  CLUSTER_WORKERS[$dir]+="$k:$pid "
}

await_cluster() {  # dir
  local dir=$1 entry k pid
  if ! wait_for_line "$dir/master.log" "Starting Spark master at|I have been elected leader" \
    90 "${CLUSTER_MASTER[$dir]}"; then
    say "the Spark Master of $dir did not start; the end of its log:"
    tail -n 30 "$dir/master.log" | sed 's/^/  /'
    return 1
  fi
  for entry in ${CLUSTER_WORKERS[$dir]}; do
    k=${entry%%:*}
    pid=${entry#*:}
    if ! wait_for_line "$dir/host$k/worker.log" "Successfully registered with master" 120 "$pid"; then
      say "the Spark Worker of $(ns_name "$k") did not register; the end of its log:"
      tail -n 30 "$dir/host$k/worker.log" | sed 's/^/  /'
      say "the end of the Master's log:"
      tail -n 10 "$dir/master.log" | sed 's/^/  /'
      return 1
    fi
  done
}

# Every executor JVM on host K (of the main cluster: hosts 1..HOSTS).
executor_pids() {  # k
  local pid
  for pid in $(ip netns pids "$(ns_name "$1")" 2>/dev/null); do
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
      grep -qE 'CoarseGrainedExecutorBackend|YarnCoarseGrainedExecutorBackend' && echo "$pid"
  done
}

# The last host (from HOSTS down) that runs an executor, or nothing.
host_with_executor() {
  local k
  for ((k = HOSTS; k >= 1; k--)); do
    if [[ -n $(executor_pids "$k") ]]; then
      echo "$k"
      return 0
    fi
  done
  return 1
}

# ---------------------------------------------------------------------------------------------
# Data, solvers, runs.

TRAIN=""
TEST=""

prepare_data() {
  local dir
  for dir in "$DATA_DIR" "$ROOT/examples/spark-fashion-mnist/data"; do
    [[ -n $dir ]] || continue
    if [[ -f $dir/fashion_mnist_train.parquet/_SUCCESS && -f $dir/fashion_mnist_test.parquet/_SUCCESS ]]; then
      TRAIN=$(cd "$dir" && pwd)/fashion_mnist_train.parquet
      TEST=$(cd "$dir" && pwd)/fashion_mnist_test.parquet
      note "data: $TRAIN, $TEST (reused)"
      return 0
    fi
  done
  [[ -z $DATA_DIR ]] || note "DATA_DIR=$DATA_DIR has no fashion_mnist_{train,test}.parquet: converting"
  mkdir -p "$WORK/data"
  TRAIN=$WORK/data/fashion_mnist_train.parquet
  TEST=$WORK/data/fashion_mnist_test.parquet
  local start=$SECONDS d=$FASHION_MNIST_DIR
  note "converting Fashion-MNIST to Parquet (io.cortado.data.IdxToParquet, local[2], loopback)"
  timeout -k 10 600 env -u SPARK_HOME SPARK_LOCAL_IP=127.0.0.1 "$SUBMIT" --master 'local[2]' \
    --driver-memory 2g --conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 \
    --conf spark.ui.enabled=false --conf "spark.local.dir=$WORK/data" \
    --driver-java-options "-Dlog4j2.configurationFile=$WORK/log4j2.properties -Djava.io.tmpdir=$WORK/tmp" \
    --class io.cortado.data.IdxToParquet "$JAR_COPY" \
    "$d/train-images-idx3-ubyte.gz" "$d/train-labels-idx1-ubyte.gz" "$TRAIN" \
    "$d/t10k-images-idx3-ubyte.gz" "$d/t10k-labels-idx1-ubyte.gz" "$TEST" \
    >"$WORK/data/convert.log" 2>&1 </dev/null &
  local pid=$!
  track_pid "$pid"
  wait "$pid"
  local rc=$?
  if [[ $rc -ne 0 || ! -f $TRAIN/_SUCCESS || ! -f $TEST/_SUCCESS ]]; then
    say "converting Fashion-MNIST failed (exit status $rc); the end of its log:"
    tail -n 30 "$WORK/data/convert.log" | sed 's/^/  /'
    return 1
  fi
  note "data converted in $((SECONDS - start)) s: $WORK/data"
}

write_log4j() {
  cat >"$WORK/log4j2.properties" <<'EOF'
# The driver's log: Spark's warnings and Cortado's training log, with milliseconds.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
logger.cortado.name = io.cortado
logger.cortado.level = info
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
EOF
}

# The example's net with batch 64/workers per worker and the data at absolute file: paths, and
# its solver with that net, max_iter and the given extra settings (each "key: value" replaces
# the solver's line of that key, or is added).
write_solver() {  # dir workers max_iter [key: value]...
  local dir=$1 workers=$2 iters=$3 example=$ROOT/examples/spark-fashion-mnist setting key
  shift 3
  mkdir -p "$dir"
  sed -e "0,/batch_size: 64/s//batch_size: $((64 / workers))/" \
    -e "s|source: \"[^\"]*fashion_mnist_train.parquet\"|source: \"file:$TRAIN\"|" \
    -e "s|source: \"[^\"]*fashion_mnist_test.parquet\"|source: \"file:$TEST\"|" \
    "$example/lenet_cos_train_test.prototxt" >"$dir/net.prototxt"
  sed -e "s|^net: .*|net: \"$dir/net.prototxt\"|" -e "s|^max_iter: .*|max_iter: $iters|" \
    "$example/lenet_cos_solver.prototxt" >"$dir/solver.prototxt"
  for setting in "$@"; do
    key=${setting%%:*}
    if grep -q "^$key:" "$dir/solver.prototxt"; then
      sed -i "s|^$key:.*|$setting|" "$dir/solver.prototxt"
    else
      echo "$setting" >>"$dir/solver.prototxt"
    fi
  done
  grep -q "batch_size: $((64 / workers))" "$dir/net.prototxt" &&
    grep -q "file:$TRAIN" "$dir/net.prototxt" && grep -q "file:$TEST" "$dir/net.prototxt"
}

SUBMIT_PID=""
SUBMIT_MASTER=$MASTER_URL
SUBMIT_CONF=()  # extra spark-submit options of the next start_submit
# Starts spark-submit in the background against the standalone cluster at SUBMIT_MASTER (or a
# local master given as --master ... first), stdout to dir/out.txt, stderr (the driver's log) to
# dir/driver.log.
start_submit() {  # dir timeout cores [--master M] args...
  local dir=$1 limit=$2 cores=$3
  shift 3
  local -a master=(--master "$SUBMIT_MASTER" --deploy-mode client --total-executor-cores "$cores"
    --conf "spark.driver.host=$BRIDGE_ADDR" --conf "spark.driver.bindAddress=$BRIDGE_ADDR")
  local local_ip=$BRIDGE_ADDR
  if [[ ${1:-} == --master ]]; then
    master=(--master "$2")
    local_ip=127.0.0.1
    shift 2
  fi
  mkdir -p "$dir/local"
  local -a cmd=(timeout -k 10 "$limit" env -u SPARK_HOME "SPARK_LOCAL_IP=$local_ip" "$SUBMIT"
    "${master[@]}" --driver-memory "$DRIVER_MEMORY"
    --driver-java-options "-Dlog4j2.configurationFile=$WORK/log4j2.properties -Djava.io.tmpdir=$WORK/tmp"
    --conf "spark.executor.extraJavaOptions=-Djava.io.tmpdir=$WORK/tmp"
    --executor-memory "$EXECUTOR_MEMORY" --executor-cores 1
    --conf spark.ui.enabled=false --conf "spark.local.dir=$dir/local"
    --conf spark.executorEnv.SPARK_TESTING=1 --conf spark.executorEnv.SPARK_SCALA_VERSION=2.12
    --conf "spark.executorEnv.SPARK_DIST_CLASSPATH=$CP" "${SUBMIT_CONF[@]}"
    --class io.cortado.spark.CortadoOnSpark "$JAR_COPY" "$@")
  # What ran, for running it again by hand (the classpath as the file it came from).
  local shown
  shown=$(printf '%q ' "${cmd[@]}")
  # shellcheck disable=SC2016  # the $(cat ...) is for the file
  echo "${shown//"$(printf '%q' "$CP")"/'"$(cat '"$WORK"'/spark-classpath.txt)"'}" >"$dir/command.sh"
  (cd "$dir" && exec "${cmd[@]}") >"$dir/out.txt" 2>"$dir/driver.log" </dev/null &
  SUBMIT_PID=$!
  track_pid "$SUBMIT_PID"
}

# The tails of a scenario's logs: the driver's, its stdout, the executors' of this run.
show_logs() {  # dir
  local dir=$1 f
  say "  --- the end of the driver's log ($dir/driver.log):"
  tail -n 25 "$dir/driver.log" 2>/dev/null | cut -c1-400 | sed 's/^/  | /'
  if [[ -s $dir/out.txt ]]; then
    say "  --- the end of its standard output:"
    tail -n 10 "$dir/out.txt" | sed 's/^/  | /'
  fi
  local -a files=()
  mapfile -t files < <(find "$WORK" -path '*/spark-home/work/*' -name stderr -newer "$dir/command.sh" 2>/dev/null)
  for f in "${files[@]}"; do
    say "  --- the end of an executor's log ($f):"
    tail -n 12 "$f" | cut -c1-400 | sed 's/^/  | /'
  done
}

# The highest iteration in a driver's log so far.
last_iteration() {  # log
  grep -oE 'Iteration [0-9]+' "$1" 2>/dev/null | awk '{ if ($2 + 0 > m) m = $2 + 0 } END { print m + 0 }'
}

# Seconds per iteration from a driver's log: "seconds iterations s_per_iter display_s_per_iter".
# The first three from Cortado's closing line "Trained N iterations in S s of training" (worker
# 0's wall time in the training loop, test passes during training included, snapshot writing
# not; the last attempt's), the last the mean of the display lines' speed (the wall time between
# displays, over their iterations; a test pass inside an interval included).
iteration_speed() {  # log
  awk '
    match($0, /Trained [0-9]+ iterations in [0-9.]+ s of training/) {
      split(substr($0, RSTART, RLENGTH), w, " "); n = w[2] + 0; sec = w[5] + 0
    }
    match($0, /iter\/s, [0-9.e+]+s\/[0-9]+ iters/) {
      t = substr($0, RSTART, RLENGTH); sub(/^iter\/s, /, "", t); split(t, p, "s/")
      sub(/ iters/, "", p[2]); dsec += p[1]; dit += p[2]
    }
    END {
      d = "-"; if (dit > 0) d = sprintf("%.5f", dsec / dit)
      if (n > 0) printf "%.2f %d %.5f %s\n", sec, n, sec / n, d
      else printf "- - - %s\n", d
    }' "$1"
}

# The longest gap (s) between consecutive iteration lines of a driver's log.
longest_gap() {  # log
  awk 'function secs(t,   a) { split(t, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
    /Iteration [0-9]+/ { t = secs($1); if (p != "") { g = t - p; if (g < 0) g += 86400; if (g > m) m = g }; p = t }
    END { printf "%.1f\n", m }' "$1"
}

PASSED=0
FAILED=0
declare -a RESULTS=()
pass() {  # scenario text
  say "PASS $1: $2"
  PASSED=$((PASSED + 1))
  RESULTS+=("PASS $1")
}
fail() {  # scenario text [dir]
  say "FAIL $1: $2"
  FAILED=$((FAILED + 1))
  RESULTS+=("FAIL $1")
  [[ -z ${3:-} ]] || show_logs "$3"
}

banner() {
  say ""
  say "=== $* ==="
}

declare -a BENCH_TABLE=()  # "where|iterations|seconds|s/iter|display s/iter|accuracy"
LOCAL_SPI=""

# The last accuracy a run's -test printed (dir/out.txt), or nothing.
printed_accuracy() {  # dir
  grep -oE 'accuracy = [0-9.]+' "$1/out.txt" 2>/dev/null | tail -n 1 | awk '{print $3}'
}

# demo (and local): train ITERATIONS, test, check the accuracy, print the speed.
scenario_demo() {  # name [local]
  local name=$1 mode=${2:-cluster} dir=$WORK/$1 threshold rc start
  threshold=$(demo_threshold "$ITERATIONS")
  if ! write_solver "$dir" "$WORKERS" "$ITERATIONS"; then
    fail "$name" "cannot write its solver and net in $dir"
    return
  fi
  local -a extra=()
  [[ $mode != local ]] || extra=(--master "local-cluster[$WORKERS,1,1024]")
  start=$SECONDS
  start_submit "$dir" "$RUN_TIMEOUT" "$WORKERS" "${extra[@]}" -train -test \
    -conf "$dir/solver.prototxt" -clusterSize "$WORKERS" -model "file:$dir/lenet.caffemodel" \
    -output "file:$dir/test_results"
  wait "$SUBMIT_PID"
  rc=$?
  local took=$((SECONDS - start)) accuracy speed
  accuracy=$(printed_accuracy "$dir")
  speed=$(iteration_speed "$dir/driver.log")
  local wall iters spi dspi
  read -r wall iters spi dspi <<<"$speed"
  local where="$WORKERS workers on $HOSTS hosts, links $CURRENT_RATE"
  [[ $mode != local ]] || where="local-cluster[$WORKERS,1,1024], loopback"
  say "$name: spark-submit exit status $rc after $took s; accuracy = ${accuracy:-none}" \
    "(threshold $threshold, $ITERATIONS iterations)"
  say "$name: $iters iterations in $wall s of training = $spi s/iteration" \
    "(Cortado's 'Trained' line; display lines' mean: $dspi s/iteration; $where;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores)"
  BENCH_TABLE+=("$where|$ITERATIONS|$wall|$spi|$dspi|${accuracy:--}")
  [[ $mode != local ]] || LOCAL_SPI=$spi
  if [[ $rc -ne 0 ]]; then
    fail "$name" "spark-submit failed (exit status $rc$([[ $rc -ne 124 ]] || echo ": timed out after $RUN_TIMEOUT s"))" "$dir"
  elif [[ -z $accuracy ]]; then
    fail "$name" "no 'accuracy = ' line in its output" "$dir"
  elif awk -v a="$accuracy" -v t="$threshold" 'BEGIN { exit !(a + 0 >= t + 0) }'; then
    pass "$name" "accuracy = $accuracy >= $threshold after $ITERATIONS iterations; $spi s/iteration ($where)"
  else
    fail "$name" "accuracy = $accuracy < $threshold after $ITERATIONS iterations" "$dir"
  fi
}

# Polls until the driver's log shows iteration >= n, or a file exists; fails if spark-submit ends.
wait_progress() {  # dir what(iteration N | file PATH-GLOB) seconds
  local dir=$1 what=$2 arg=$3 limit=$(($4 * 5)) i=0
  while ((i < limit)); do
    kill -0 "$SUBMIT_PID" 2>/dev/null || return 1
    case $what in
      iteration) (($(last_iteration "$dir/driver.log") >= arg)) && return 0 ;;
      file) compgen -G "$arg" >/dev/null && return 0 ;;
    esac
    sleep 0.2
    i=$((i + 1))
  done
  return 1
}

RESUME_PATTERN='Attempt [0-9]+ resumes from [^ ]*_iter_[0-9]+\.solverstate|Spark runs this training again .*resuming from [^ ]*_iter_[0-9]+\.solverstate'

# Writes dir's solver (iterations, a snapshot every SNAPSHOT_EVERY, no test passes) and starts
# training there in the background (start_submit); when the files cannot be written, fails the
# scenario and returns 1.
start_snapshotting() {  # name dir iterations
  local name=$1 dir=$2 iterations=$3
  if ! write_solver "$dir" "$WORKERS" "$iterations" "snapshot: $SNAPSHOT_EVERY" \
    'snapshot_prefix: "lenet"' "display: 20" "test_interval: 100000" "test_initialization: false"; then
    fail "$name" "cannot write its solver and net in $dir"
    return 1
  fi
  start_submit "$dir" "$RUN_TIMEOUT" "$WORKERS" -train -conf "$dir/solver.prototxt" \
    -clusterSize "$WORKERS" -model "file:$dir/lenet.caffemodel"
}

scenario_kill() {
  local name=kill dir=$WORK/kill rc start host pids
  start=$SECONDS
  start_snapshotting "$name" "$dir" "$KILL_ITERATIONS" || return
  if ! wait_progress "$dir" file "$dir/lenet_iter_*.solverstate" 300; then
    wait "$SUBMIT_PID" 2>/dev/null
    fail "$name" "no snapshot appeared in $dir before spark-submit ended or 300 s passed" "$dir"
    return
  fi
  local snap at
  snap=$(compgen -G "$dir/lenet_iter_*.solverstate" | head -n 1)
  at=$(last_iteration "$dir/driver.log")
  host=$(host_with_executor)
  pids=$([[ -z $host ]] || executor_pids "$host")
  if [[ -z $pids ]]; then
    kill -TERM "$SUBMIT_PID" 2>/dev/null
    wait "$SUBMIT_PID" 2>/dev/null
    fail "$name" "found no executor JVM (CoarseGrainedExecutorBackend) in any host namespace" "$dir"
    return
  fi
  local victim=${pids%%$'\n'*}
  say "$name: ${snap##*/} written, driver at iteration $at: kill -9 executor JVM $victim in $(ns_name "$host")"
  kill -KILL "$victim"
  wait "$SUBMIT_PID"
  rc=$?
  local took=$((SECONDS - start)) resumed last
  resumed=$(grep -oE "$RESUME_PATTERN" "$dir/driver.log" | head -n 1)
  last=$(last_iteration "$dir/driver.log")
  say "$name: spark-submit exit status $rc after $took s; last iteration $last of $KILL_ITERATIONS"
  [[ -z $resumed ]] || say "$name: the driver's log: ... $resumed"
  grep -E 'Training attempt [0-9]+ of [0-9]+ failed' "$dir/driver.log" | head -n 2 | cut -c1-300 | sed "s/^/$name: /"
  if [[ $rc -ne 0 ]]; then
    fail "$name" "spark-submit failed after the kill (exit status $rc)" "$dir"
  elif [[ -z $resumed ]]; then
    fail "$name" "finished, but the driver's log shows no resume from a snapshot" "$dir"
  elif ((last < KILL_ITERATIONS)) || [[ ! -s $dir/lenet.caffemodel ]]; then
    fail "$name" "finished, but training did not reach iteration $KILL_ITERATIONS or wrote no model" "$dir"
  else
    pass "$name" "executor killed at iteration ~$at, job finished by itself in $took s (exit 0), resumed: $resumed"
  fi
}

# elastic: a host lost for good a third of the way in (its Worker and executor killed), the run
# going on with one worker fewer (-minWorkers), and, with ELASTIC_RETURN=1, the host's Worker
# started again: the run grows back.
scenario_elastic() {
  local name=elastic dir=$WORK/elastic rc start host entry worker="" at lost_at shrunk_at
  local iterations=$ELASTIC_ITERATIONS fewer=$((WORKERS - 1))
  start=$SECONDS
  if ! write_solver "$dir" "$WORKERS" "$iterations" "snapshot: $ELASTIC_SNAPSHOT_EVERY" \
    'snapshot_prefix: "lenet"' "display: 20" "test_interval: 100000" "test_initialization: false" \
    "random_seed: $ELASTIC_SEED"; then
    fail "$name" "cannot write its solver and net in $dir"
    return
  fi
  SUBMIT_CONF=(--conf "spark.cortado.elasticTimeout=$ELASTIC_WAIT")
  # ELASTIC_HOST_LOST=0: only the executor dies, its Worker starts another, and the run (not
  # elastic) resumes on as many workers: the same resume without a change of workers.
  local min=$fewer
  [[ $ELASTIC_HOST_LOST == 1 ]] || min=$WORKERS
  start_submit "$dir" "$RUN_TIMEOUT" "$WORKERS" -train -test -conf "$dir/solver.prototxt" \
    -clusterSize "$WORKERS" -minWorkers "$min" -model "file:$dir/lenet.caffemodel" \
    -output "file:$dir/test_results"
  SUBMIT_CONF=()
  if [[ $ELASTIC_KILL == 0 ]]; then
    # The same run without a fault, for the comparison.
    wait "$SUBMIT_PID"
    rc=$?
    local accuracy
    accuracy=$(printed_accuracy "$dir")
    grep -oE 'Trained [0-9]+ iterations in [0-9.]+ s of training[^"]*' "$dir/driver.log" | sed "s/^/$name: /"
    if [[ $rc -ne 0 || -z $accuracy ]]; then
      fail "$name" "without a fault: exit status $rc, accuracy ${accuracy:-none}" "$dir"
    else
      pass "$name" "without a fault (ELASTIC_KILL=0): finished in $((SECONDS - start)) s; accuracy = $accuracy"
    fi
    return
  fi
  if ! wait_progress "$dir" iteration $((iterations / 3)) 600; then
    wait "$SUBMIT_PID" 2>/dev/null
    fail "$name" "the driver's log did not reach iteration $((iterations / 3))" "$dir"
    return
  fi
  at=$(last_iteration "$dir/driver.log")
  host=$(host_with_executor)
  for entry in ${CLUSTER_WORKERS[$WORK/cluster]}; do
    [[ ${entry%%:*} != "$host" ]] || worker=${entry#*:}
  done
  if [[ -z $host || -z $worker ]]; then
    kill -TERM "$SUBMIT_PID" 2>/dev/null
    wait "$SUBMIT_PID" 2>/dev/null
    fail "$name" "found no host with both a Worker and an executor" "$dir"
    return
  fi
  # The host is gone: its Worker first (so that nothing starts the executor again), then the
  # executor JVM.
  lost_at=$SECONDS
  local -a victims
  mapfile -t victims < <(executor_pids "$host")
  [[ $ELASTIC_HOST_LOST == 0 ]] || victims+=("$worker")
  kill -KILL "${victims[@]}" 2>/dev/null
  local killed_clock
  killed_clock=$(date +%T.%3N)
  local what="the Worker and executor"
  [[ $ELASTIC_HOST_LOST == 1 ]] || what="the executor"
  say "$name: driver at iteration $at: killed $what of $(ns_name "$host") at $killed_clock"
  if [[ $ELASTIC_HOST_LOST == 0 ]]; then
    wait "$SUBMIT_PID"
    rc=$?
    local accuracy resumed
    accuracy=$(printed_accuracy "$dir")
    resumed=$(grep -oE "$RESUME_PATTERN" "$dir/driver.log" | head -n 1)
    say "$name: executor only: exit status $rc; ${resumed:-no resume}; accuracy = ${accuracy:-none}"
    if [[ $rc -ne 0 || -z $accuracy || -z $resumed ]]; then
      fail "$name" "executor only: exit status $rc, accuracy ${accuracy:-none}, ${resumed:-no resume}" "$dir"
    else
      pass "$name" "executor only (ELASTIC_HOST_LOST=0): resumed on $WORKERS workers; accuracy = $accuracy"
    fi
    return
  fi
  if [[ $ELASTIC_RETURN == 1 ]]; then
    if wait_for_line "$dir/driver.log" "goes on with $fewer of $WORKERS workers" 300 "$SUBMIT_PID"; then
      shrunk_at=$SECONDS
      sleep "$ELASTIC_RETURN_AFTER"
      say "$name: went on with $fewer worker(s) $((shrunk_at - lost_at)) s after the loss;" \
        "starting the Worker of $(ns_name "$host") again"
      start_worker "$WORK/cluster" "$MASTER_PORT" "$host"
    fi
  fi
  wait "$SUBMIT_PID"
  rc=$?
  local took=$((SECONDS - start)) last accuracy threshold shrink grow resumed
  last=$(last_iteration "$dir/driver.log")
  accuracy=$(printed_accuracy "$dir")
  threshold=$(demo_threshold "$iterations")
  shrink=$(grep -oE "Elastic training: attempt [0-9]+ goes on with $fewer of $WORKERS workers .* from iteration [0-9]+" "$dir/driver.log" | head -n 1)
  grow=$(grep -oE "Elastic training: attempt [0-9]+ goes on with $WORKERS of $WORKERS workers .* from iteration [0-9]+" "$dir/driver.log" | head -n 1)
  resumed=$(grep -oE 'worker [0-9]+ \(executor [0-9]+ on [^)]*\) failed: [^.]*' "$dir/driver.log" | head -n 1)
  say "$name: spark-submit exit status $rc after $took s; last iteration $last of $iterations;" \
    "accuracy = ${accuracy:-none} (threshold $threshold)"
  [[ -z $resumed ]] || say "$name: the driver's log: $resumed"
  [[ -z $shrink ]] || say "$name: the driver's log: $shrink"
  [[ -z $grow ]] || say "$name: the driver's log: $grow"
  grep -oE 'Trained [0-9]+ iterations in [0-9.]+ s of training[^"]*' "$dir/driver.log" | sed "s/^/$name: /"
  # When training went on after the loss: the driver's clock at the resize line and at the
  # first iteration line after it (the time lost to the resize, with the kill's time above).
  awk -v n="$name" -v fewer="$fewer" -v all="$WORKERS" '
    index($0, "goes on with " fewer " of " all " workers") && !r { r = $1; next }
    r && !i && / Iteration [0-9]+ \(/ { i = $1; it = $0; sub(/.* Iteration /, "", it); sub(/ .*/, "", it) }
    END { if (r) printf "%s: resize logged at %s; first iteration line after it at %s (iteration %s)\n", n, r, i, it }
  ' "$dir/driver.log"
  if [[ $rc -ne 0 ]]; then
    fail "$name" "spark-submit failed after the host was lost (exit status $rc)" "$dir"
  elif [[ -z $shrink ]]; then
    fail "$name" "finished, but the driver's log shows no attempt on $fewer of $WORKERS workers" "$dir"
  elif [[ $ELASTIC_RETURN == 1 && -z $grow ]]; then
    fail "$name" "finished, but did not grow back to $WORKERS workers once the host returned" "$dir"
  elif ((last < iterations)) || [[ -z $accuracy ]]; then
    fail "$name" "did not reach iteration $iterations, or printed no accuracy" "$dir"
  elif ! awk -v a="$accuracy" -v t="$threshold" 'BEGIN { exit !(a + 0 >= t + 0) }'; then
    fail "$name" "accuracy = $accuracy < $threshold" "$dir"
  else
    pass "$name" "host lost at iteration ~$at; $( [[ $ELASTIC_RETURN == 1 ]] && echo "shrank and grew back" || echo "shrank" ); finished in $took s; accuracy = $accuracy"
  fi
}

scenario_link() {
  local name=link dir=$WORK/link rc start host veth down_at up_at
  start=$SECONDS
  start_snapshotting "$name" "$dir" "$LINK_ITERATIONS" || return
  if ! wait_progress "$dir" iteration "$LINK_DOWN_AT" 300; then
    wait "$SUBMIT_PID" 2>/dev/null
    fail "$name" "the driver's log did not reach iteration $LINK_DOWN_AT before spark-submit ended or 300 s passed" "$dir"
    return
  fi
  host=$(host_with_executor)
  if [[ -z $host ]]; then
    kill -TERM "$SUBMIT_PID" 2>/dev/null
    wait "$SUBMIT_PID" 2>/dev/null
    fail "$name" "found no executor JVM in any host namespace" "$dir"
    return
  fi
  veth=$(ns_veth_root "$host")
  say "$name: driver at iteration $(last_iteration "$dir/driver.log"): ip link set $veth down" \
    "($(ns_name "$host")'s link) for $LINK_DOWN_SECONDS s"
  down_at=$SECONDS
  ip link set "$veth" down
  # Up again after LINK_DOWN_SECONDS, even if spark-submit ends sooner.
  local i=0
  while ((i < LINK_DOWN_SECONDS * 5)); do
    sleep 0.2
    i=$((i + 1))
  done
  ip link set "$veth" up
  up_at=$SECONDS
  say "$name: $veth up again after $((up_at - down_at)) s (driver at iteration $(last_iteration "$dir/driver.log"))"
  local bound=$((LINK_DOWN_SECONDS + LINK_BOUND_EXTRA)) left
  left=$((bound - (SECONDS - down_at)))
  local waited=0
  while kill -0 "$SUBMIT_PID" 2>/dev/null && ((waited < left * 5)); do
    sleep 0.2
    waited=$((waited + 1))
  done
  local late=0
  if kill -0 "$SUBMIT_PID" 2>/dev/null; then
    late=1
    kill -TERM "$SUBMIT_PID" 2>/dev/null
  fi
  wait "$SUBMIT_PID"
  rc=$?
  local took=$((SECONDS - start)) after=$((SECONDS - down_at)) resumed last gap how
  resumed=$(grep -oE "$RESUME_PATTERN" "$dir/driver.log" | head -n 1)
  last=$(last_iteration "$dir/driver.log")
  gap=$(longest_gap "$dir/driver.log")
  how="rode the outage out (no resume)"
  [[ -z $resumed ]] || how="resumed: $resumed"
  say "$name: spark-submit exit status $rc after $took s ($after s after the link went down);" \
    "last iteration $last of $LINK_ITERATIONS; longest gap between iteration lines $gap s; $how"
  grep -E 'Training attempt [0-9]+ of [0-9]+ failed' "$dir/driver.log" | head -n 2 | cut -c1-300 | sed "s/^/$name: /"
  # Worker 0's word on the stall (after commTimeout/4 = 30 s without a byte, by default).
  local stalled
  stalled=$(grep -oE 'Training stalls: worker 0 has waited [0-9]+ s for [^(]+\([^)]*\)[^(]*' "$dir/driver.log" | head -n 1)
  [[ -z $stalled ]] || say "$name: the driver's log: $stalled"
  if ((late)); then
    fail "$name" "still running $bound s after the link went down (killed)" "$dir"
  elif [[ -z $resumed && ${gap%.*} -ge 40 && -z $stalled ]]; then
    fail "$name" "training stood still ${gap} s with no 'Training stalls' line in the driver's log" "$dir"
  elif [[ $rc -ne 0 ]]; then
    fail "$name" "spark-submit failed (exit status $rc)" "$dir"
  elif ((last < LINK_ITERATIONS)) || [[ ! -s $dir/lenet.caffemodel ]]; then
    fail "$name" "finished, but training did not reach iteration $LINK_ITERATIONS or wrote no model" "$dir"
  else
    pass "$name" "link of $(ns_name "$host") down $LINK_DOWN_SECONDS s; finished (exit 0) $after s after it went down (bound $bound s); longest stall $gap s; $how"
  fi
}

# slots runs on a cluster of its own (SLOTS_WORKERS one-core Workers on hosts HOSTS+1...), in the
# background beside kill and link, since most of it is Cortado's wait for slots.
SLOTS_PID=""
SLOTS_START=0
SLOTS_LIMIT=300
SLOTS_WAIT=${SLOTS_WAIT:-20}
start_slots() {
  local dir=$WORK/slots size=$((SLOTS_WORKERS + 1))
  banner "slots: -clusterSize $size on $SLOTS_WORKERS one-core workers ($SLOTS_URL) must fail" \
    "clearly; in the background, reported at the end"
  if ! write_solver "$dir" 1 100 "test_interval: 100000" "test_initialization: false"; then
    fail slots "cannot write its solver and net in $dir"
    return
  fi
  SLOTS_START=$(date +%s)
  SUBMIT_MASTER=$SLOTS_URL
  # The driver waits spark.cortado.startTimeout for the slots (120 s unset).
  SUBMIT_CONF=(--conf "spark.cortado.startTimeout=$SLOTS_WAIT")
  start_submit "$dir" "$SLOTS_LIMIT" "$SLOTS_WORKERS" -train -conf "$dir/solver.prototxt" \
    -clusterSize "$size" -model "file:$dir/lenet.caffemodel"
  SUBMIT_CONF=()
  SUBMIT_MASTER=$MASTER_URL
  SLOTS_PID=$SUBMIT_PID
}

finish_slots() {
  local name=slots dir=$WORK/slots size=$((SLOTS_WORKERS + 1)) rc
  [[ -n $SLOTS_PID ]] || return 0
  banner "slots: -clusterSize $size on $SLOTS_WORKERS one-core workers ($SLOTS_URL)"
  wait "$SLOTS_PID"
  rc=$?
  # Until its log's last line (it may have ended well before this wait).
  local took=$(($(stat -c %Y "$dir/driver.log") - SLOTS_START)) line
  line=$(grep -oE "training with $size workers needs $size task slots at once.*" "$dir/driver.log" | head -n 1)
  say "$name: spark-submit exit status $rc after $took s"
  [[ -z $line ]] || say "$name: the driver's error: $line"
  if [[ $rc -eq 0 ]]; then
    fail "$name" "-clusterSize $size on $SLOTS_WORKERS one-core workers succeeded" "$dir"
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
    fail "$name" "spark-submit hung: killed by timeout after $SLOTS_LIMIT s" "$dir"
  elif [[ -z $line ]]; then
    fail "$name" "exit status $rc without Cortado's 'needs $size task slots' error" "$dir"
  elif [[ $line != *"offers $SLOTS_WORKERS ("* ]]; then
    fail "$name" "the error does not say the cluster offers $SLOTS_WORKERS slots" "$dir"
  elif [[ $line != *"after $SLOTS_WAIT s"* ]]; then
    fail "$name" "the driver did not wait spark.cortado.startTimeout=$SLOTS_WAIT s" "$dir"
  else
    pass "$name" "-clusterSize $size on $SLOTS_WORKERS workers refused after $took s (exit $rc): $line"
  fi
}

# ---------------------------------------------------------------------------------------------

CURRENT_RATE=$RATE
CP=""
JAR_COPY=""

# Every selected scenario failed before it ran (the set-up failed).
all_failed() {  # reason
  say "$1"
  FAILED=$(wc -w <<<"$SCENARIOS")
  say "$NAME: $PASSED passed, $FAILED failed"
  return 1
}

reshape() {  # rate
  CURRENT_RATE=$1
  if [[ $1 == none ]]; then ns_shape none "$NS_HOSTS"; else ns_shape "$1" "$NS_HOSTS" >/dev/null; fi
}

main() {
  local run_start=$SECONDS
  check_settings
  # Skip cleanly where this cannot run.
  local why
  why=$(ns_blocker)
  [[ -z $why ]] || skip "$why"
  command -v java >/dev/null 2>&1 || skip "no java"
  command -v timeout >/dev/null 2>&1 || skip "needs coreutils' timeout"
  command -v pgrep >/dev/null 2>&1 || skip "needs procps' pgrep"
  [[ -f $FASHION_MNIST_DIR/train-images-idx3-ubyte.gz && -f $FASHION_MNIST_DIR/t10k-labels-idx1-ubyte.gz ]] ||
    skip "no Fashion-MNIST in $FASHION_MNIST_DIR (apt-get install dataset-fashion-mnist)"
  if [[ -z $JAR ]]; then
    JAR=$(find_jar) || skip "no jar: scala-bridge/target/cortado-<version>.jar (build it with mvn package, or give JAR=)"
  fi
  [[ -f $JAR ]] || skip "no jar at $JAR"
  ensure_classpath || skip "no Spark classpath ($CLASSPATH_FILE; mvn dependency:build-classpath failed)"

  # One run at a time: the namespaces, the bridge and the pid file are shared names.
  if command -v flock >/dev/null 2>&1; then
    { exec 9>"$LOCKFILE"; } 2>/dev/null || die "cannot open $LOCKFILE"
    flock -n 9 || die "another tests/spark/hosts_apart.sh is running ($LOCKFILE)"
  fi
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # Leftovers of an earlier run.
  kill_our_pids
  ns_remove_all 1

  if [[ -z $WORK_DIR ]]; then
    WORK=$(mktemp -d /tmp/cortado-hosts-apart.XXXXXX) || die "cannot create a run folder in /tmp"
    WORK_CREATED=1
  else
    [[ $WORK_DIR != *[[:space:]]* ]] || die "WORK_DIR: no spaces, please (it goes into JVM options)"
    [[ -e $WORK_DIR ]] || WORK_CREATED=1
    mkdir -p "$WORK_DIR" || die "cannot create WORK_DIR=$WORK_DIR"
    WORK=$(cd "$WORK_DIR" && pwd)
  fi
  # The jar and classpath as they are now: another build may replace them while this runs.
  JAR_COPY=$WORK/${JAR##*/}
  cp "$JAR" "$JAR_COPY" || die "cannot copy $JAR"
  cp "$CLASSPATH_FILE" "$WORK/spark-classpath.txt"
  # Every JVM's temporary files (native libraries unpacked, what a killed executor leaves) here.
  mkdir -p "$WORK/tmp"
  CP=$(cat "$WORK/spark-classpath.txt")
  write_log4j
  note "run folder: $WORK; jar: $JAR (copied); $(nproc) cores; $(java -version 2>&1 | head -n 1)"
  note "scenarios: $SCENARIOS; hosts: $HOSTS; workers: $WORKERS; rate: ${BENCH_RATES:-$RATE}; iterations: $ITERATIONS"

  local -a selected
  read -ra selected <<<"$SCENARIOS"
  local main_cluster=0 slots=0 s k
  for s in "${selected[@]}"; do
    case $s in
      demo | kill | link | elastic) main_cluster=1 ;;
      slots) slots=1 ;;
    esac
  done
  NS_HOSTS=0
  ((main_cluster)) && NS_HOSTS=$HOSTS
  ((slots)) && NS_HOSTS=$((HOSTS + SLOTS_WORKERS))
  if ((NS_HOSTS)); then
    note "hosts $(ns_name 1)..$(ns_name "$NS_HOSTS") ($(ns_addr 1)..$(ns_addr "$NS_HOSTS")), veths" \
      "$(ns_veth_root 1)..$(ns_veth_root "$NS_HOSTS") on bridge $NS_BRIDGE ($BRIDGE_ADDR)"
    ns_setup "$NS_HOSTS" || { all_failed "cannot build the hosts' network"; return 1; }
    local first_rate=$RATE
    [[ -z $BENCH_RATES ]] || first_rate=${BENCH_RATES%% *}
    CURRENT_RATE=$first_rate
    if [[ $first_rate == none ]]; then note "links unshaped"; else
      local shaped
      shaped=$(ns_shape "$first_rate" "$NS_HOSTS") || die "cannot shape the links at $first_rate"
      note "$shaped on $(ns_veth_root 1)..$(ns_veth_root "$NS_HOSTS") and" \
        "$(ns_veth_host 1)..$(ns_veth_host "$NS_HOSTS")"
    fi
    for ((k = 1; k <= NS_HOSTS; k++)); do
      ns_check_path "$k" $((k % NS_HOSTS + 1)) ||
        die "$(ns_name "$k") cannot reach $BRIDGE_ADDR or $(ns_addr $((k % NS_HOSTS + 1)))"
    done
  fi
  prepare_data || { all_failed "no data"; return 1; }
  ((main_cluster)) && launch_cluster "$WORK/cluster" "$MASTER_PORT" $(seq 1 "$HOSTS")
  ((slots)) && launch_cluster "$WORK/slots-cluster" "$SLOTS_PORT" \
    $(seq $((HOSTS + 1)) $((HOSTS + SLOTS_WORKERS)))
  if ((main_cluster)); then await_cluster "$WORK/cluster" || { all_failed "the cluster did not start"; return 1; }; fi
  if ((slots)); then await_cluster "$WORK/slots-cluster" || { all_failed "the slots cluster did not start"; return 1; }; fi
  ((NS_HOSTS)) && note "clusters up after $((SECONDS - run_start)) s"

  local rate
  for s in "${selected[@]}"; do
    # slots starts once demo is done, beside kill and link (not beside demo or local, whose
    # speed it would disturb).
    if [[ $s == kill || $s == link || $s == elastic ]] && ((slots)) && [[ -z $SLOTS_PID ]]; then
      start_slots
    fi
    case $s in
      demo)
        if [[ -n $BENCH_RATES ]]; then
          for rate in $BENCH_RATES; do
            reshape "$rate"
            banner "demo: LeNet on Fashion-MNIST, -clusterSize $WORKERS on $HOSTS hosts, links $rate"
            scenario_demo "demo-$rate"
          done
          reshape "$RATE"
        else
          banner "demo: LeNet on Fashion-MNIST, -clusterSize $WORKERS on $HOSTS hosts, links $RATE"
          scenario_demo demo
        fi
        ;;
      kill)
        banner "kill: kill -9 an executor JVM mid-training; the job must finish by itself"
        scenario_kill
        ;;
      link)
        banner "link: a host's link down for $LINK_DOWN_SECONDS s mid-training"
        scenario_link
        ;;
      elastic)
        banner "elastic: a host lost for good a third of the way in, -minWorkers $((WORKERS - 1))"
        scenario_elastic
        ;;
      local)
        banner "local: the demo in local-cluster[$WORKERS,1,1024] on loopback, for the ratio"
        scenario_demo local local
        ;;
    esac
  done
  if ((slots)); then
    [[ -n $SLOTS_PID ]] || start_slots
    finish_slots
  fi

  if ((${#BENCH_TABLE[@]} > 1)) || [[ -n $BENCH_RATES ]]; then
    banner "seconds per iteration (Cortado's 'Trained N iterations in S s of training': S / N)"
    printf '%-36s %6s %9s %9s %13s %9s %9s\n' "where" iters "train(s)" "s/iter" "display s/it" \
      "/ local" accuracy
    local row
    for row in "${BENCH_TABLE[@]}"; do
      awk -F'|' -v l="$LOCAL_SPI" '{
        r = (l != "" && l != "-" && $4 != "-") ? sprintf("%.2f", $4 / l) : "-"
        printf "%-36s %6s %9s %9s %13s %9s %9s\n", $1, $2, $3, $4, $5, r, $6 }' <<<"$row"
    done
  fi
  say ""
  note "whole run: $((SECONDS - run_start)) s"
  say "$NAME: $PASSED passed, $FAILED failed"
  ((FAILED == 0))
}

main "$@"; exit $?  # one line: an edit of this file while it runs cannot derail bash
