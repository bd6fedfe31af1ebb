#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# AllReduce bandwidth of the communicator backends beside Open MPI's MPI_Allreduce, as
# cortado_comm_bench reports it (nccl-tests' algbw and busbw), in two settings:
#   1. loopback: our tcp (N processes on 127.0.0.1 ports), our ucx (the same, once per UCX_TLS of
#      UCX_TLS_LOOPBACK: unset (UCX's choice), tcp, then sm,self), our mpi (mpirun --backend=mpi) and MPI_Allreduce
#      itself (--mpi-native) over btl tcp, btl vader (shared memory) and pml ucx (once per
#      UCX_TLS_LOOPBACK); then busbw of our tcp against MPI_Allreduce btl tcp for the larger
#      buffers, and of our ucx against our tcp from 64 KiB;
#   2. network namespaces: every rank in its own namespace (cbench0, cbench1, ...), each joined by a
#      veth pair to one bridge in the root namespace (cbench-br, 10.213.0.0/24), both directions of
#      every link shaped with tbf to each rate of RATES; our tcp, our ucx (UCX_TLS=tcp on the
#      veth), our mpi, MPI_Allreduce btl tcp and pml ucx (UCX_TLS=tcp) across the namespaces; then
#      busbw against the link rate, and our ucx against our tcp from 64 KiB.
# Everything it creates (namespaces, veths, bridge, processes, raised sysctls) is removed or
# restored on exit, and leftovers of an earlier run are removed first. See bench/comm/README.md.
#
# Run from anywhere, as root for part 2 (network namespaces, tc):
#   bash bench/comm/run.sh
# Needs: cortado_comm_bench (configure with -DBUILD_BENCH=ON, WITH_MPI=ON for the mpi runs and
# WITH_UCX=ON for the ucx runs), coreutils' timeout; part 2 iproute2's ip and tc (installed with
# apt-get when missing, as root) and python3 for the rate check; the mpi runs Open MPI's mpirun
# (pml ucx: an Open MPI built with UCX, as Debian's).
# Settings (environment):
#   BUILD_DIR=build          where cortado_comm_bench was built (relative to the repository root)
#   BIN=...                  the benchmark itself (default $BUILD_DIR/bench/comm/cortado_comm_bench)
#   SIZES=4K:256M            buffer sizes, doubling, MIN:MAX (K, M, G: powers of 1024)
#   RANKS="2 4"              rank counts
#   RANKS_PER_HOST=1         part 2: ranks per namespace, in blocks (rank r in cbench(r / K)), as
#                            executors sharing hosts; our tcp and ucx only (SKIP_MPI=1)
#   PLACEMENT=blocks         with RANKS_PER_HOST > 1: "interleaved" puts rank r in cbench(r mod H)
#                            of H namespaces (as Spark may place a barrier stage's tasks)
#   RATES="1gbit 10gbit"     link rates of part 2 (tc units; "none" for an unshaped run)
#   ITERS=                   calls per size (default: the benchmark's own, about 1 GiB per size)
#   SKIP_LOOPBACK=1 SKIP_NETNS=1 SKIP_MPI=1   leave out part 1, part 2, every mpirun
#   SKIP_UCX=1               leave out every ucx run (our ucx backend and MPI's pml ucx)
#   MPI_BTLS="tcp vader"     the BTLs MPI_Allreduce runs over on loopback (our mpi: btl tcp)
#   UCX_TLS_LOOPBACK="any tcp sm,self"   the UCX_TLS of each loopback run of our ucx and of pml
#                            ucx (with UCX_NET_DEVICES=lo; "any": unset, UCX's own choice, which is
#                            shared memory for ranks of one host); the namespaces always use UCX_TLS=tcp
#                            with UCX_NET_DEVICES=cbench-nK (shared memory would bypass the links)
#   BENCH_FLAGS=             more flags for every cortado_comm_bench (e.g. --chunk-bytes=1M)
#   MPIRUN_ARGS=             more arguments for every mpirun (e.g. "--mca btl_tcp_links 2")
#   TIMEOUT=1800             seconds one run may take
#   PORT_BASE=29500          first port tried for our tcp ranks
#   NET=10.213.0             the /24 of the namespaces (rank K is NET.K+1, the bridge NET.254)
#   MTU=1500                 of the veths and the bridge
#   TBF_BURST= TBF_LATENCY=50ms   tbf's bucket (default: 0.5 ms at the rate, at least 128 KiB)
#                            and queue limit in time
#   CHECK_SECONDS=3          length of the python3 throughput check of each rate (0: none)
#   TCP_BUF_MAX=             e.g. 32M: raise net.ipv4.tcp_{r,w}mem's maximum and
#                            net.core.{r,w}mem_max for the run (restored on exit)
#   LOG_DIR=                 where logs and tables go (default a new /tmp/cortado-comm-bench.*)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${BUILD_DIR:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
BIN=${BIN:-$BUILD_DIR/bench/comm/cortado_comm_bench}
SIZES=${SIZES:-4K:256M}
MIN_BYTES=${SIZES%%:*}
MAX_BYTES=${SIZES##*:}
RANKS=${RANKS:-2 4}
RANKS_PER_HOST=${RANKS_PER_HOST:-1}
PLACEMENT=${PLACEMENT:-blocks}
RATES=${RATES:-1gbit 10gbit}
ITERS=${ITERS:-}
SKIP_LOOPBACK=${SKIP_LOOPBACK:-0}
SKIP_NETNS=${SKIP_NETNS:-0}
SKIP_MPI=${SKIP_MPI:-0}
SKIP_UCX=${SKIP_UCX:-0}
MPI_BTLS=${MPI_BTLS:-tcp vader}
UCX_TLS_LOOPBACK=${UCX_TLS_LOOPBACK:-any tcp sm,self}
MPIRUN_ARGS=${MPIRUN_ARGS:-}
BENCH_FLAGS=${BENCH_FLAGS:-}
TIMEOUT=${TIMEOUT:-1800}
PORT_BASE=${PORT_BASE:-29500}
NET=${NET:-10.213.0}
MTU=${MTU:-1500}
TBF_BURST=${TBF_BURST:-}
TBF_LATENCY=${TBF_LATENCY:-50ms}
CHECK_SECONDS=${CHECK_SECONDS:-3}
TCP_BUF_MAX=${TCP_BUF_MAX:-}
LOG_DIR=${LOG_DIR:-}

BRIDGE=cbench-br
PIDFILE=/tmp/cortado-comm-bench.$EUID.pids  # processes of the run in progress, by id
LOCKFILE=/tmp/cortado-comm-bench.$EUID.lock
SUMMARY_LOOPBACK_MIN=$((4 << 20))      # the loopback comparison: buffers from 4 MiB
SUMMARY_NETNS_MIN=$((16 << 20))        # busbw against the link rate: buffers from 16 MiB
SUMMARY_UCX_MIN=$((64 << 10))          # our ucx against our tcp: buffers from 64 KiB
TARGET_PERCENT=90

say() { printf '%s\n' "$*"; }
note() { printf '# %s\n' "$*"; }
die() {
  printf 'run.sh: %s\n' "$*" >&2
  exit 1
}
flag_on() { [[ ${1:-0} != 0 && -n ${1:-} ]]; }

# "4K" -> 4096, as cortado_comm_bench reads sizes.
to_bytes() {
  local text=$1 number unit
  number=${text%[KkMmGg]}
  unit=${text#"$number"}
  [[ $number =~ ^[0-9]+$ ]] || die "not a size: '$text' (4096, 4K, 256M, 1G)"
  case $unit in
    "") echo "$number" ;;
    [Kk]) echo $((number << 10)) ;;
    [Mm]) echo $((number << 20)) ;;
    [Gg]) echo $((number << 30)) ;;
  esac
}

# A tc rate ("1gbit", "500mbit", "10gbit", "100mbps") in bits per second.
rate_bps() {
  awk -v r="$1" 'BEGIN {
    r = tolower(r); n = r + 0; u = r; sub(/^[0-9.]+/, "", u)
    m["bit"] = 1; m[""] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
    m["bps"] = 8; m["kbps"] = 8e3; m["mbps"] = 8e6; m["gbps"] = 8e9
    if (!(u in m) || n <= 0) exit 1
    printf "%.0f\n", n * m[u]
  }' || die "not a tc rate: '$1' (e.g. 1gbit, 500mbit)"
}

# ---------------------------------------------------------------------------------------------
# Cleanup: ours by id (the pid file), processes inside our namespaces, the namespaces, the links,
# the sysctls we raised. Run at start (leftovers of an earlier run) and on exit.

declare -a SYSCTL_RESTORE=()
declare -a OUR_PIDS=()
PY_TPUT=""

track_pid() {
  OUR_PIDS+=("$1")
  echo "$1" >>"$PIDFILE"
}

kill_our_pids() {
  local pid cmd
  # Processes of this run, and those an earlier run left in the pid file, if they are still ours
  # (the command line names the benchmark, mpirun, timeout or python3's throughput check).
  local -a pids=("${OUR_PIDS[@]}")
  if [[ -f $PIDFILE ]]; then
    while read -r pid; do pids+=("$pid"); done <"$PIDFILE"
  fi
  for pid in "${pids[@]}"; do
    [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || continue
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline")
    case $cmd in
      *cortado_comm_bench* | *mpirun* | *cbench-tput*) kill -TERM "$pid" 2>/dev/null ;;
    esac
  done
  rm -f "$PIDFILE"
}

list_namespaces() {
  command -v ip >/dev/null 2>&1 || return 0
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^cbench[0-9]+$' || true
}

list_links() {
  command -v ip >/dev/null 2>&1 || return 0
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
    grep -E '^cbench-(br|h[0-9]+)$' || true
}

remove_network() {
  local ns pid link removed=""
  for ns in $(list_namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null && removed+=" $ns"
  done
  for link in $(list_links); do
    ip link del "$link" 2>/dev/null && removed+=" $link"
  done
  [[ -z $removed ]] || note "removed:$removed"
}

restore_sysctls() {
  local entry
  for entry in "${SYSCTL_RESTORE[@]}"; do
    sysctl -qw "$entry" >/dev/null && note "restored sysctl $entry"
  done
  SYSCTL_RESTORE=()
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  kill_our_pids
  sleep 0.2
  remove_network
  restore_sysctls
  [[ -z $PY_TPUT ]] || rm -f "$PY_TPUT"
  [[ -z ${LOG_DIR:-} ]] || note "logs and tables: $LOG_DIR"
  exit "$rc"
}

# ---------------------------------------------------------------------------------------------
# Requirements.

need_iproute2() {
  if command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1; then return 0; fi
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    note "installing iproute2 (ip, tc) with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
  fi
  command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1
}

# Why part 2 cannot run here, or nothing.
netns_blocker() {
  [[ $EUID -eq 0 ]] || {
    echo "needs root (network namespaces, veth, tc)"
    return
  }
  need_iproute2 || {
    echo "needs iproute2's ip and tc (apt-get install iproute2)"
    return
  }
  if ! ip netns add cbench-probe 2>/dev/null; then
    echo "'ip netns add' fails here (no CAP_SYS_ADMIN / CAP_NET_ADMIN?)"
    return
  fi
  ip netns del cbench-probe
  command -v modprobe >/dev/null 2>&1 && modprobe -q sch_tbf 2>/dev/null
  true
}

MPIRUN=()
MPIRUN_UCX=()
mpirun_base() {
  MPIRUN=(mpirun --oversubscribe --bind-to none --mca pml ob1)
  # pml ucx: Open MPI 4.1 keeps it to mlx* devices and verbs transports unless told otherwise
  # (pml_ucx_tls, pml_ucx_devices), so "any" lets UCX_TLS decide; no BTL beside it.
  MPIRUN_UCX=(mpirun --oversubscribe --bind-to none --mca pml ucx --mca pml_ucx_tls any
    --mca pml_ucx_devices any --mca btl '^vader,tcp,openib,uct')
  if [[ $EUID -eq 0 ]]; then
    MPIRUN+=(--allow-run-as-root)
    MPIRUN_UCX+=(--allow-run-as-root)
  fi
  # shellcheck disable=SC2206
  [[ -z $MPIRUN_ARGS ]] || MPIRUN+=($MPIRUN_ARGS) MPIRUN_UCX+=($MPIRUN_ARGS)
}

# Probes one mode of the binary under mpirun with two ranks (our mpi backend takes a world of one
# for processes outside mpirun); prints the reason on failure.
probe_mpi_mode() {
  local out
  out=$(timeout -k 5 120 "${MPIRUN[@]}" -np 2 --mca btl self,tcp "$BIN" "$@" --min-bytes=4K \
    --max-bytes=4K --iters=1 --warmup=0 2>&1)
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    printf '%s\n' "$out" | grep -m1 -iE 'cortado_comm_bench:|error|unknown' ||
      echo "exit status $rc"
    return 1
  fi
}

# Probes MPI_Allreduce over pml ucx (UCX_TLS=tcp on lo) with two ranks.
probe_mpi_ucx() {
  local out
  out=$(UCX_TLS=tcp UCX_NET_DEVICES=lo timeout -k 5 120 "${MPIRUN_UCX[@]}" -np 2 \
    -x UCX_TLS -x UCX_NET_DEVICES "$BIN" --mpi-native --min-bytes=4K --max-bytes=4K --iters=1 \
    --warmup=0 2>&1)
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    printf '%s\n' "$out" | grep -m1 -iE 'cortado_comm_bench:|error|cannot be selected|unknown' ||
      echo "exit status $rc"
    return 1
  fi
}

# Probes our ucx backend: two ranks as threads (UCX_TLS=tcp on lo); prints the reason on failure
# (a build without WITH_UCX says so).
probe_ucx() {
  local out
  out=$(UCX_TLS=tcp UCX_NET_DEVICES=lo timeout -k 5 120 "$BIN" --threads=2 --backend=ucx \
    --min-bytes=4K --max-bytes=4K --iters=1 --warmup=0 2>&1)
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    printf '%s\n' "$out" | grep -m1 -iE 'cortado_comm_bench:|error' || echo "exit status $rc"
    return 1
  fi
}

# "sm,self" -> "sm+self": UCX_TLS as part of a file name.
tls_tag() { echo "${1//,/+}"; }

# ---------------------------------------------------------------------------------------------
# Running one configuration. Rank 0's table goes to the terminal and to $LOG_DIR/<key>.txt, its
# standard error and the other ranks' output to $LOG_DIR/<key>.*.log.

BENCH_ARGS=()
bench_args() {
  BENCH_ARGS=("--min-bytes=$MIN_BYTES" "--max-bytes=$MAX_BYTES")
  [[ -z $ITERS ]] || BENCH_ARGS+=("--iters=$ITERS")
  # shellcheck disable=SC2206
  [[ -z $BENCH_FLAGS ]] || BENCH_ARGS+=($BENCH_FLAGS)
}

declare -A RESULT_OK=()

banner() {
  say ""
  say "=== $* ==="
}

# FREE_PORT: a port nothing listens on at 127.0.0.1 (no connection accepted), from NEXT_PORT on;
# every call a new one.
NEXT_PORT=$PORT_BASE
FREE_PORT=
next_free_port() {
  while (: </dev/tcp/127.0.0.1/"$NEXT_PORT") 2>/dev/null; do NEXT_PORT=$((NEXT_PORT + 1)); done
  FREE_PORT=$NEXT_PORT
  NEXT_PORT=$((NEXT_PORT + 1))
}

finish_run() {  # key status
  local key=$1 rc=$2
  if [[ $rc -eq 0 ]] && grep -qv '^#' "$LOG_DIR/$key.txt" 2>/dev/null; then
    RESULT_OK[$key]=1
  else
    say "FAILED (exit status $rc); the last lines of its logs:"
    tail -n 5 "$LOG_DIR/$key".*.log 2>/dev/null | sed 's/^/  /'
  fi
}

# Runs a command in the background with its standard output in $LOG_DIR/<key>.txt, shown as it
# comes, its standard error in $LOG_DIR/<key>.<tag>.log; returns its exit status. (In the
# background so that a signal reaches the script's trap at once.)
run_shown() {  # key tag command...
  local key=$1 tag=$2
  shift 2
  echo "$*" >"$LOG_DIR/$key.cmd"
  : >"$LOG_DIR/$key.txt"  # there before tail looks
  "$@" >"$LOG_DIR/$key.txt" 2>"$LOG_DIR/$key.$tag.log" </dev/null 9>&- &
  local pid=$! shown rc
  track_pid "$pid"
  tail -n +1 -s 0.2 -f --pid="$pid" "$LOG_DIR/$key.txt" &
  shown=$!
  wait "$pid"
  rc=$?
  wait "$shown"
  return "$rc"
}

# Our tcp or ucx backend, one process per rank, on 127.0.0.1 (netns 0) or one per namespace.
# ucx: UCX_TLS=tls, on lo (loopback) or on the rank's own veth cbench-nK (namespaces); its set-up
# ring is a tcp ring on the same peers.
# The namespace (0..) of rank r of a world: blocks of RANKS_PER_HOST, or interleaved.
ns_of() {  # r world
  if [[ $PLACEMENT == interleaved ]]; then
    echo $(($1 % (($2 + RANKS_PER_HOST - 1) / RANKS_PER_HOST)))
  else
    echo $(($1 / RANKS_PER_HOST))
  fi
}

run_ours() {  # key world netns(0|1) backend(tcp|ucx) [tls]
  local key=$1 world=$2 netns=$3 backend=$4 tls=${5:-} r peers="" host port
  local -a ports=() pids=() wrap
  for ((r = 0; r < world; r++)); do
    if [[ $netns == 1 ]]; then
      host=$NET.$(($(ns_of "$r" "$world") + 1))
      port=$((PORT_BASE + r % RANKS_PER_HOST))
      [[ $PLACEMENT != interleaved ]] || port=$((PORT_BASE + r / ((world + RANKS_PER_HOST - 1) / RANKS_PER_HOST)))
    else
      host=127.0.0.1
      next_free_port
      port=$FREE_PORT
    fi
    peers+="${peers:+,}$host:$port"
  done
  for ((r = world - 1; r >= 0; r--)); do
    wrap=(timeout -k 10 "$TIMEOUT")
    [[ $netns != 1 ]] || wrap+=(ip netns exec "cbench$(ns_of "$r" "$world")")
    if [[ $backend == ucx ]]; then
      if [[ $netns == 1 ]]; then
        wrap+=(env "UCX_TLS=$tls" "UCX_NET_DEVICES=cbench-n$(ns_of "$r" "$world")")
      elif [[ $tls == any ]]; then
        wrap+=(env -u UCX_TLS UCX_NET_DEVICES=lo)
      else
        wrap+=(env "UCX_TLS=$tls" UCX_NET_DEVICES=lo)
      fi
    fi
    local cmd=("${wrap[@]}" "$BIN" "--backend=$backend" "--rank=$r" "--world=$world"
      "--peers=$peers" "${BENCH_ARGS[@]}")
    if [[ $r -gt 0 ]]; then
      "${cmd[@]}" >"$LOG_DIR/$key.rank$r.log" 2>&1 </dev/null 9>&- &
      pids+=($!)
      track_pid $!
    else
      run_shown "$key" rank0 "${cmd[@]}"
      local rc=$? pid st
      for pid in "${pids[@]}"; do
        [[ $rc -eq 0 ]] || kill -TERM "$pid" 2>/dev/null
        wait "$pid"
        st=$?
        [[ $rc -ne 0 || $st -eq 0 ]] || rc=$st
      done
      finish_run "$key" "$rc"
    fi
  done
}

# mpirun on loopback: our mpi backend (mode mpi) or MPI_Allreduce (mode native) over a BTL, or
# MPI_Allreduce over pml ucx (btl "ucx:TLS": UCX_TLS=TLS, UCX_NET_DEVICES=lo).
run_mpi_loopback() {  # key world mode btl
  local key=$1 world=$2 mode=$3 btl=$4
  local -a cmd=(timeout -k 10 "$TIMEOUT" "${MPIRUN[@]}" -np "$world" --mca btl "self,$btl" "$BIN")
  if [[ $btl == ucx:any ]]; then
    cmd=(timeout -k 10 "$TIMEOUT" env -u UCX_TLS UCX_NET_DEVICES=lo "${MPIRUN_UCX[@]}"
      -np "$world" -x UCX_NET_DEVICES "$BIN")
  elif [[ $btl == ucx:* ]]; then
    cmd=(timeout -k 10 "$TIMEOUT" env "UCX_TLS=${btl#ucx:}" UCX_NET_DEVICES=lo "${MPIRUN_UCX[@]}"
      -np "$world" -x UCX_TLS -x UCX_NET_DEVICES "$BIN")
  fi
  if [[ $mode == native ]]; then cmd+=(--mpi-native); else cmd+=(--backend=mpi); fi
  cmd+=("${BENCH_ARGS[@]}")
  run_shown "$key" mpirun "${cmd[@]}"
  finish_run "$key" $?
}

# mpirun across the namespaces: one app context per rank, each started with ip netns exec. The
# ranks reach mpirun's PMIx server through the bridge (the server listens on NET.254 instead of
# the root namespace's 127.0.0.1, which no namespace can reach), and each other with btl tcp over
# their veths. Shared memory (vader) would bypass the shaped links, so only self,tcp. Mode
# native-ucx: MPI_Allreduce over pml ucx with UCX_TLS=tcp on each rank's own veth.
run_mpi_netns() {  # key world mode(mpi|native|native-ucx)
  local key=$1 world=$2 mode=$3 r
  local -a cmd=(timeout -k 10 "$TIMEOUT" env PMIX_MCA_ptl_tcp_remote_connections=1
    "PMIX_MCA_ptl_tcp_if_include=$NET.0/24")
  if [[ $mode == native-ucx ]]; then
    cmd+=("${MPIRUN_UCX[@]}")
  else
    cmd+=("${MPIRUN[@]}" --mca btl self,tcp --mca btl_tcp_if_include "$NET.0/24")
  fi
  cmd+=(--mca oob_tcp_if_include "$NET.0/24")
  local mode_flag=--backend=mpi
  [[ $mode == mpi ]] || mode_flag=--mpi-native
  local -a ucx_env=()
  for ((r = 0; r < world; r++)); do
    [[ $r -eq 0 ]] || cmd+=(:)
    [[ $mode != native-ucx ]] || ucx_env=(env UCX_TLS=tcp "UCX_NET_DEVICES=cbench-n$r")
    cmd+=(-np 1 ip netns exec "cbench$r" "${ucx_env[@]}" "$BIN" "$mode_flag" "${BENCH_ARGS[@]}")
  done
  run_shown "$key" mpirun "${cmd[@]}"
  finish_run "$key" $?
}

# ---------------------------------------------------------------------------------------------
# Part 2's network: cbench0..N-1, veth cbench-hK (root side, on the bridge) <-> cbench-nK (in
# cbenchK, NET.K+1/24), bridge cbench-br (NET.254/24).

setup_network() {  # namespaces
  local n=$1 k ns
  ip link add "$BRIDGE" type bridge stp_state 0 forward_delay 0 || return 1
  ip link set "$BRIDGE" mtu "$MTU"
  ip addr add "$NET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for ((k = 0; k < n; k++)); do
    ns=cbench$k
    ip netns add "$ns" || return 1
    ip link add "cbench-h$k" mtu "$MTU" type veth peer name "cbench-n$k" mtu "$MTU" || return 1
    ip link set "cbench-n$k" netns "$ns"
    ip link set "cbench-h$k" master "$BRIDGE"
    ip link set "cbench-h$k" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$NET.$((k + 1))/24" dev "cbench-n$k"
    ip -n "$ns" link set "cbench-n$k" up
    if [[ -n $TCP_BUF_MAX ]]; then  # per namespace; gone with it
      ip netns exec "$ns" sysctl -qw "net.ipv4.tcp_wmem=4096 16384 $TCP_BUF_BYTES" \
        "net.ipv4.tcp_rmem=4096 131072 $TCP_BUF_BYTES" >/dev/null
    fi
  done
}

# tbf on both ends of every link: egress of cbench-nK (the namespace sending) and of cbench-hK
# (the bridge sending to the namespace). burst: at least 128 KiB (two 64 KiB GSO packets: tbf
# splits a packet larger than its bucket) and 0.5 ms at the rate, enough that the timer's
# granularity costs nothing (at 10gbit a 64 KiB bucket gave 3.6 Gbit/s); latency 50 ms: the queue
# holds the few MiB TCP keeps in flight without a drop.
shape_links() {  # rate namespaces
  local rate=$1 n=$2 k burst
  if [[ $rate == none ]]; then
    for ((k = 0; k < n; k++)); do
      tc qdisc del dev "cbench-h$k" root 2>/dev/null
      ip netns exec "cbench$k" tc qdisc del dev "cbench-n$k" root 2>/dev/null
    done
    return 0
  fi
  burst=$TBF_BURST
  if [[ -z $burst ]]; then
    burst=$(awk -v bps="$(rate_bps "$rate")" \
      'BEGIN { b = bps / 8 * 0.0005; if (b < 131072) b = 131072; printf "%d\n", b }')
  fi
  for ((k = 0; k < n; k++)); do
    tc qdisc replace dev "cbench-h$k" root tbf rate "$rate" burst "$burst" latency "$TBF_LATENCY" ||
      return 1
    ip netns exec "cbench$k" tc qdisc replace dev "cbench-n$k" root tbf rate "$rate" \
      burst "$burst" latency "$TBF_LATENCY" || return 1
  done
  note "tbf rate $rate burst $burst latency $TBF_LATENCY on cbench-h0..$((n - 1)) and cbench-n0..$((n - 1))"
}

write_tput_script() {
  PY_TPUT=$(mktemp /tmp/cbench-tput.XXXXXX.py)
  cat >"$PY_TPUT" <<'EOF'
# Bulk TCP throughput: recv HOST PORT | send HOST PORT SECONDS | ring HOST PORT NEXT SECONDS.
# The receiver prints the payload rate in Mbit/s after the first 0.5 s (slow start left out).
# ring: one rank of a ring of bare sockets, the traffic pattern of a ring allreduce without its
# dependencies: a thread sends to NEXT:PORT for SECONDS while the main thread receives from
# whoever connects to HOST:PORT and prints what it received.
import socket, sys, threading, time
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def sender(peer, seconds):
    for _ in range(200):
        try: c = socket.create_connection((peer, port)); break
        except OSError: time.sleep(0.05)
    else: sys.exit("cannot connect to %s:%d" % (peer, port))
    data = memoryview(bytearray(1 << 20)); end = time.monotonic() + seconds
    while time.monotonic() < end: c.sendall(data)
    c.close()
if mode in ("recv", "ring"):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(1); s.settimeout(30)
    if mode == "ring":
        threading.Thread(target=sender, args=(sys.argv[4], float(sys.argv[5])), daemon=True).start()
    c, _ = s.accept()
    view = memoryview(bytearray(1 << 20))
    total, t0, mark, last = 0, None, None, None
    while True:
        n = c.recv_into(view)
        if n == 0: break
        last = time.monotonic()
        if t0 is None: t0 = last
        total += n
        if mark is None and last - t0 >= 0.5: mark = (last, total)
    if mark is None or last <= mark[0]: print("0"); sys.exit(1)
    print("%.1f" % ((total - mark[1]) * 8 / (last - mark[0]) / 1e6))
else:
    sender(host, float(sys.argv[4]))
EOF
}

# Payload rate cbench0 -> cbench1 over the shaped path (two tbfs), against the configured rate.
# tbf counts Ethernet frames: with TCP timestamps a frame of MTU + 14 bytes carries MTU - 52 bytes
# of payload, so the payload can reach (MTU - 52) / (MTU + 14) of the rate (95.6% at 1500).
check_rate() {  # rate key
  local rate=$1 key=$2 recv_pid mbit bps
  [[ $CHECK_SECONDS != 0 ]] || return 0
  command -v python3 >/dev/null 2>&1 || {
    note "no python3: rate check left out"
    return 0
  }
  ip netns exec cbench1 python3 "$PY_TPUT" recv "$NET.2" 5201 >"$LOG_DIR/$key.check" 2>&1 9>&- &
  recv_pid=$!
  track_pid $recv_pid
  ip netns exec cbench0 python3 "$PY_TPUT" send "$NET.2" 5201 "$CHECK_SECONDS" \
    2>>"$LOG_DIR/$key.check" 9>&-
  wait $recv_pid
  mbit=$(head -n1 "$LOG_DIR/$key.check")
  if [[ ! $mbit =~ ^[0-9.]+$ ]]; then
    note "rate check failed: $(tail -n1 "$LOG_DIR/$key.check")"
    return 1
  fi
  if [[ $rate == none ]]; then
    note "rate check (python3, cbench0 -> cbench1, ${CHECK_SECONDS}s, unshaped): payload $mbit Mbit/s"
    echo "none $mbit" >"$LOG_DIR/$key.rate"
    return 0
  fi
  bps=$(rate_bps "$rate")
  awk -v m="$mbit" -v bps="$bps" -v mtu="$MTU" -v s="$CHECK_SECONDS" 'BEGIN {
    conf = bps / 1e6; frames = m * (mtu + 14) / (mtu - 52)
    printf "# rate check (python3, cbench0 -> cbench1, %ss): configured %.0f Mbit/s, " \
      "payload %.1f Mbit/s = %.1f%%; as Ethernet frames %.1f Mbit/s = %.1f%% " \
      "(payload ceiling %.1f%% at MTU %d)\n",
      s, conf, m, 100 * m / conf, frames, 100 * frames / conf, 100 * (mtu - 52) / (mtu + 14), mtu
  }'
  echo "$bps $mbit" >"$LOG_DIR/$key.rate"
}

# The same pattern as a ring allreduce, with bare sockets: each of cbench0..N-1 sends to the next
# while it receives from the previous, for CHECK_SECONDS. What one rank receives is what a ring
# can move per link on this machine with nothing else to do (no summing, no dependencies between
# the directions): the ceiling our tcp's busbw is read against. Writes the lowest rank's Mbit/s.
check_ring() {  # rate n key
  local rate=$1 n=$2 key=$3 k pids=() mbit low=""
  [[ $CHECK_SECONDS != 0 ]] || return 0
  command -v python3 >/dev/null 2>&1 || return 0
  for ((k = 0; k < n; k++)); do
    ip netns exec "cbench$k" python3 "$PY_TPUT" ring "$NET.$((k + 1))" 5202 \
      "$NET.$(((k + 1) % n + 1))" "$CHECK_SECONDS" >"$LOG_DIR/$key.ring.$k" 2>&1 9>&- &
    pids+=($!)
    track_pid $!
  done
  for k in "${!pids[@]}"; do wait "${pids[$k]}"; done
  for ((k = 0; k < n; k++)); do
    mbit=$(head -n1 "$LOG_DIR/$key.ring.$k")
    if [[ ! $mbit =~ ^[0-9.]+$ ]]; then
      note "ring check failed on cbench$k: $(tail -n1 "$LOG_DIR/$key.ring.$k")"
      return 1
    fi
    low=$(awk -v a="$low" -v b="$mbit" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }')
  done
  echo "$low" >"$LOG_DIR/$key.ring"
  awk -v m="$low" -v bps="$(rate_bps "$rate")" -v n="$n" -v s="$CHECK_SECONDS" 'BEGIN {
    printf "# ring check (python3, %d namespaces each sending to the next, %ss): lowest rank " \
      "received %.1f Mbit/s = %.1f%% of the rate\n", n, s, m, 100 * m / (bps / 1e6) }'
}

# ---------------------------------------------------------------------------------------------
# Summaries.

# busbw of each file by size, sizes >= min: "size busbw1 busbw2 ..." ("-" where missing).
join_busbw() {  # min files...
  local min=$1
  shift
  awk -v min="$min" -v nf="$#" '
    FNR == 1 { f++ }
    !/^#/ && NF >= 5 && $1 + 0 >= min { v[$1, f] = $5; sizes[$1] = 1 }
    END {
      n = 0; for (s in sizes) list[++n] = s + 0
      for (i = 2; i <= n; i++) {  # insertion sort, numerically
        x = list[i]
        for (j = i - 1; j >= 1 && list[j] > x; j--) list[j + 1] = list[j]
        list[j + 1] = x
      }
      for (i = 1; i <= n; i++) {
        line = list[i]
        for (k = 1; k <= nf; k++) line = line " " (((list[i], k) in v) ? v[list[i], k] : "-")
        print line
      }
    }' "$@"
}

ok_file() {  # key -> the table, or /dev/null
  if [[ -n ${RESULT_OK[$1]:-} ]]; then echo "$LOG_DIR/$1.txt"; else echo /dev/null; fi
}

# Files given as /dev/null count as empty, so a missing run shows as "-".
join_busbw_keys() {  # min keys...
  local min=$1 key
  shift
  local -a files=()
  for key in "$@"; do files+=("$(ok_file "$key")"); done
  # awk skips empty files entirely (FNR == 1 never fires): give each a header line.
  local tmp i=0
  tmp=$(mktemp -d)
  for key in "${files[@]}"; do
    i=$((i + 1))
    { echo "#"; cat "$key"; } >"$tmp/$i"
  done
  join_busbw "$min" $(for ((k = 1; k <= i; k++)); do echo "$tmp/$k"; done)
  rm -rf "$tmp"
}

summary_loopback() {
  local n
  banner "summary, loopback: busbw (GB/s) for buffers >= $((SUMMARY_LOOPBACK_MIN >> 20)) MiB; ratio = our tcp / MPI_Allreduce btl tcp"
  for n in $RANKS; do
    say "-- $n ranks"
    printf '%14s %12s %12s %14s %14s %8s\n' "size(B)" "our tcp" "our mpi" "MPI btl tcp" "MPI btl vader" ratio
    join_busbw_keys "$SUMMARY_LOOPBACK_MIN" "loopback.tcp.$n" "loopback.mpi-tcp.$n" \
      "loopback.native-tcp.$n" "loopback.native-vader.$n" |
      awk '{
        r = ($2 != "-" && $4 != "-" && $4 > 0) ? $2 / $4 : -1
        printf "%14s %12s %12s %14s %14s %8s\n", $1, $2, $3, $4, $5, r < 0 ? "-" : sprintf("%.2f", r)
        if (r > 0) { lg += log(r); c++ }
      } END { if (c) printf "%14s geometric mean of the ratio over %d sizes: %.2f\n", "", c, exp(lg / c) }'
  done
}

summary_netns() {
  local rate n bps link check
  banner "summary, namespaces: busbw against the link rate for buffers >=" \
    "$((SUMMARY_NETNS_MIN >> 20)) MiB (target: our tcp >= ${TARGET_PERCENT}% of the link)"
  for rate in $RATES; do
    [[ $rate != none ]] || continue
    bps=$(rate_bps "$rate")
    link=$(awk -v b="$bps" 'BEGIN { printf "%.4f", b / 8e9 }')
    check=""
    if [[ -f $LOG_DIR/netns-$rate.rate ]]; then
      check=$(awk '{ printf "; python3 check: payload %.4f GB/s", $2 / 8e3 }' "$LOG_DIR/netns-$rate.rate")
    fi
    for n in $RANKS; do
      say "-- $rate, $n ranks: link $link GB/s per direction$check"
      if [[ -f $LOG_DIR/netns-$rate.$n.ring ]]; then
        awk -v link="$link" -v n="$n" '{ printf "   bare sockets in a ring of %d (python3, no summing): %.4f GB/s = %.1f%% of the link\n",
          n, $1 / 8e3, 100 * $1 / 8e3 / link }' "$LOG_DIR/netns-$rate.$n.ring"
      fi
      printf '%14s %12s %7s %12s %7s %14s %7s\n' "size(B)" "our tcp" "%link" "our mpi" "%link" \
        "MPI btl tcp" "%link"
      join_busbw_keys "$SUMMARY_NETNS_MIN" "netns-$rate.tcp.$n" "netns-$rate.mpi.$n" \
        "netns-$rate.native-tcp.$n" |
        awk -v link="$link" -v target="$TARGET_PERCENT" '
          function pct(x) { return x == "-" ? "-" : sprintf("%.1f", 100 * x / link) }
          {
            printf "%14s %12s %7s %12s %7s %14s %7s\n", $1, $2, pct($2), $3, pct($3), $4, pct($4)
            if ($2 != "-") { c++; p = 100 * $2 / link; if (c == 1 || p < low) low = p }
          }
          END {
            if (c) printf "%14s our tcp: lowest %.1f%% of the link -> target %s\n", "", low,
              (low >= target ? "met" : "NOT met")
          }'
    done
  done
}

# Our ucx against our tcp: busbw per size from SUMMARY_UCX_MIN of our tcp (the first column),
# then of each spec "label=key"; a label starting with "ucx" also gets a column ucx / our tcp,
# and below the table, the lowest such ratio and whether "not slower than our tcp on any size"
# held. link (GB/s, or empty): each busbw also as % of it.
ucx_table() {  # link specs...
  local link=$1 spec
  shift
  local -a labels=() keys=()
  for spec in "$@"; do
    labels+=("${spec%%=*}")
    keys+=("${spec#*=}")
  done
  join_busbw_keys "$SUMMARY_UCX_MIN" "${keys[@]}" |
    awk -v labels="$(IFS='|'; echo "${labels[*]}")" -v link="$link" '
      BEGIN {
        n = split(labels, label, "|")
        line = sprintf("%12s", "size(B)")
        for (k = 1; k <= n; k++) {
          w[k] = length(label[k]) < 9 ? 9 : length(label[k])
          line = line sprintf("  %*s", w[k], label[k])
          if (link != "") line = line sprintf(" %6s", "%link")
        }
        for (k = 2; k <= n; k++) {
          if (label[k] !~ /^ucx/) continue
          ratio[k] = 1
          rname[k] = label[k] " / " label[1]
          line = line sprintf("  %*s", length(rname[k]), rname[k])
        }
        print line
      }
      function pct(x) { return x == "-" ? "-" : sprintf("%.1f", 100 * x / link) }
      {
        line = sprintf("%12s", $1)
        for (k = 1; k <= n; k++) {
          line = line sprintf("  %*s", w[k], $(k + 1))
          if (link != "") line = line sprintf(" %6s", pct($(k + 1)))
        }
        for (k = 2; k <= n; k++) {
          if (!(k in ratio)) continue
          r = ($2 != "-" && $(k + 1) != "-" && $2 > 0) ? $(k + 1) / $2 : -1
          line = line sprintf("  %*s", length(rname[k]), r < 0 ? "-" : sprintf("%.2f", r))
          if (r < 0) continue
          c[k]++
          if (c[k] == 1 || r < low[k]) { low[k] = r; at[k] = $1 }
          lg[k] += log(r)
        }
        print line
      }
      END {
        for (k = 2; k <= n; k++) {
          if (!(k in ratio) || !c[k]) continue
          printf "%12s %s: lowest %.2f (at %s B), geometric mean %.2f over %d sizes -> " \
            "not slower than %s on any size: %s\n", "", rname[k], low[k], at[k],
            exp(lg[k] / c[k]), c[k], label[1],
            (low[k] >= 1 ? "held" : low[k] >= 0.98 ? "NOT held (short by under 2%)" : "NOT held")
        }
      }'
}

summary_ucx() {
  local n tls rate bps link
  local -a specs
  if ! flag_on "$SKIP_LOOPBACK"; then
    banner "summary, our ucx against our tcp, loopback: busbw (GB/s) for buffers >=" \
      "$((SUMMARY_UCX_MIN >> 10)) KiB (target: ucx not slower than our tcp on any size)"
    for n in $RANKS; do
      say "-- $n ranks"
      specs=("our tcp=loopback.tcp.$n")
      for tls in $UCX_TLS_LOOPBACK; do
        specs+=("ucx($tls)=loopback.ucx-$(tls_tag "$tls").$n")
      done
      specs+=("MPI btl tcp=loopback.native-tcp.$n")
      for tls in $UCX_TLS_LOOPBACK; do
        specs+=("MPI pml ucx($tls)=loopback.native-ucx-$(tls_tag "$tls").$n")
      done
      ucx_table "" "${specs[@]}"
    done
  fi
  [[ $1 == 1 ]] || return 0
  banner "summary, our ucx against our tcp, namespaces (UCX_TLS=tcp): busbw (GB/s) for buffers" \
    ">= $((SUMMARY_UCX_MIN >> 10)) KiB, %link of the shaped rate"
  for rate in $RATES; do
    link=""
    if [[ $rate != none ]]; then
      bps=$(rate_bps "$rate")
      link=$(awk -v b="$bps" 'BEGIN { printf "%.4f", b / 8e9 }')
    fi
    for n in $RANKS; do
      say "-- $rate, $n ranks${link:+: link $link GB/s per direction}"
      ucx_table "$link" "our tcp=netns-$rate.tcp.$n" "ucx(tcp)=netns-$rate.ucx.$n" \
        "MPI btl tcp=netns-$rate.native-tcp.$n" "MPI pml ucx(tcp)=netns-$rate.native-ucx.$n"
    done
  done
}

# ---------------------------------------------------------------------------------------------

main() {
  MIN_BYTES_N=$(to_bytes "$MIN_BYTES")
  MAX_BYTES_N=$(to_bytes "$MAX_BYTES")
  ((MIN_BYTES_N >= 4 && MIN_BYTES_N <= MAX_BYTES_N)) || die "SIZES=$SIZES: need 4 <= MIN <= MAX"
  local n max_ranks=0
  for n in $RANKS; do
    [[ $n =~ ^[0-9]+$ && $n -ge 2 ]] || die "RANKS: '$n' is not a rank count >= 2"
    ((n > max_ranks)) && max_ranks=$n
  done
  ((max_ranks < 250)) || die "RANKS: at most 249 ranks in $NET.0/24"
  [[ $RANKS_PER_HOST =~ ^[1-9][0-9]*$ ]] || die "RANKS_PER_HOST: '$RANKS_PER_HOST' is not a count >= 1"
  [[ $PLACEMENT == blocks || $PLACEMENT == interleaved ]] || die "PLACEMENT: blocks or interleaved, not '$PLACEMENT'"
  ((RANKS_PER_HOST == 1)) || flag_on "$SKIP_MPI" || flag_on "$SKIP_NETNS" ||
    die "RANKS_PER_HOST=$RANKS_PER_HOST: the mpirun runs place one rank per namespace; set SKIP_MPI=1"
  local hosts=$(((max_ranks + RANKS_PER_HOST - 1) / RANKS_PER_HOST))
  ((hosts >= 2)) || flag_on "$SKIP_NETNS" || die "RANKS_PER_HOST=$RANKS_PER_HOST leaves one namespace: nothing crosses a link"
  [[ -x $BIN ]] || die "no benchmark at $BIN: configure with -DBUILD_BENCH=ON (and -DWITH_MPI=ON for \
the mpi runs), build the target cortado_comm_bench, and give BUILD_DIR= (or BIN=)"
  command -v timeout >/dev/null 2>&1 || die "needs coreutils' timeout"
  if [[ -n $TCP_BUF_MAX ]]; then TCP_BUF_BYTES=$(to_bytes "$TCP_BUF_MAX"); fi
  local rate
  for rate in $RATES; do [[ $rate == none ]] || rate_bps "$rate" >/dev/null; done

  if [[ -z $LOG_DIR ]]; then LOG_DIR=$(mktemp -d /tmp/cortado-comm-bench.XXXXXX); fi
  mkdir -p "$LOG_DIR" || die "cannot create LOG_DIR=$LOG_DIR"

  # One run at a time: the namespaces and the pid file are shared names.
  if command -v flock >/dev/null 2>&1; then
    { exec 9>"$LOCKFILE"; } 2>/dev/null || die "cannot open $LOCKFILE"
    flock -n 9 || die "another bench/comm/run.sh is running ($LOCKFILE)"
  fi
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # Leftovers of an earlier run.
  kill_our_pids
  remove_network

  bench_args
  note "cortado_comm_bench: $BIN"
  note "sizes $MIN_BYTES to $MAX_BYTES, ranks: $RANKS, iters: ${ITERS:-auto}; $(nproc) cores$(
    ((max_ranks > $(nproc))) && echo " (more ranks than cores: oversubscribed, ranks share cores)")"
  note "$(uname -sr); $(sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null | sed 's/^/tcp congestion control /')"
  local sysctls="" name
  for name in net.core.rmem_max net.core.wmem_max net.ipv4.tcp_rmem net.ipv4.tcp_wmem; do
    sysctls+=" $name='$(sysctl -n "$name" | tr '\t' ' ')'"
  done
  note "sysctl:$sysctls"
  note "(neither backend sets SO_SNDBUF/SO_RCVBUF, so core.[rw]mem_max do not apply; the TCP" \
    "buffers grow up to tcp_[rw]mem's maximum)"
  if [[ -n $TCP_BUF_MAX ]]; then
    [[ $EUID -eq 0 ]] || die "TCP_BUF_MAX needs root"
    for name in net.core.rmem_max net.core.wmem_max net.ipv4.tcp_rmem net.ipv4.tcp_wmem; do
      SYSCTL_RESTORE+=("$name=$(sysctl -n "$name" | tr '\t' ' ')")
    done
    sysctl -qw "net.core.rmem_max=$TCP_BUF_BYTES" "net.core.wmem_max=$TCP_BUF_BYTES" \
      "net.ipv4.tcp_rmem=4096 131072 $TCP_BUF_BYTES" "net.ipv4.tcp_wmem=4096 16384 $TCP_BUF_BYTES" \
      >/dev/null || die "cannot raise the TCP buffer limits"
    note "raised for this run (restored on exit): core.[rw]mem_max and tcp_[rw]mem's maximum to $TCP_BUF_BYTES"
  fi

  local mpi_ours=0 mpi_native=0 mpi_ucx=0 ucx_ours=0 why
  if ! flag_on "$SKIP_UCX"; then
    if why=$(probe_ucx); then ucx_ours=1; else
      note "our ucx backend left out: --backend=ucx fails: $why"
    fi
  fi
  if ! flag_on "$SKIP_MPI"; then
    if ! command -v mpirun >/dev/null 2>&1; then
      note "no mpirun: the MPI runs are left out"
    else
      mpirun_base
      note "$(mpirun --version 2>/dev/null | head -n1); mpirun ${MPIRUN[*]:1}"
      if why=$(probe_mpi_mode --mpi-native); then mpi_native=1; else
        note "MPI_Allreduce runs left out: --mpi-native fails: $why"
      fi
      if why=$(probe_mpi_mode --backend=mpi); then mpi_ours=1; else
        note "our mpi backend left out: --backend=mpi fails: $why"
      fi
      if ! flag_on "$SKIP_UCX"; then
        note "pml ucx: ${MPIRUN_UCX[*]:1}"
        if why=$(probe_mpi_ucx); then mpi_ucx=1; else
          note "MPI_Allreduce over pml ucx left out: it fails: $why"
        fi
      fi
    fi
  fi

  if ! flag_on "$SKIP_LOOPBACK"; then
    local btl tls
    for n in $RANKS; do
      banner "loopback, our tcp, $n ranks (processes on 127.0.0.1)"
      run_ours "loopback.tcp.$n" "$n" 0 tcp
      if [[ $ucx_ours == 1 ]]; then
        for tls in $UCX_TLS_LOOPBACK; do
          banner "loopback, our ucx (UCX_TLS=$tls), $n ranks (processes on 127.0.0.1)"
          run_ours "loopback.ucx-$(tls_tag "$tls").$n" "$n" 0 ucx "$tls"
        done
      fi
      if [[ $mpi_ours == 1 ]]; then
        banner "loopback, our mpi, $n ranks (mpirun, btl self,tcp)"
        run_mpi_loopback "loopback.mpi-tcp.$n" "$n" mpi tcp
      fi
      if [[ $mpi_native == 1 ]]; then
        for btl in $MPI_BTLS; do
          banner "loopback, MPI_Allreduce, $n ranks (mpirun, btl self,$btl)"
          run_mpi_loopback "loopback.native-$btl.$n" "$n" native "$btl"
        done
      fi
      if [[ $mpi_ucx == 1 ]]; then
        for tls in $UCX_TLS_LOOPBACK; do
          banner "loopback, MPI_Allreduce, $n ranks (mpirun, pml ucx, UCX_TLS=$tls)"
          run_mpi_loopback "loopback.native-ucx-$(tls_tag "$tls").$n" "$n" native "ucx:$tls"
        done
      fi
    done
  fi

  local netns_done=0
  if ! flag_on "$SKIP_NETNS"; then
    why=$(netns_blocker)
    if [[ -n $why ]]; then
      note "network namespaces left out: $why"
    else
      write_tput_script
      note "namespaces cbench0..$((hosts - 1)) ($NET.1..$hosts), veths" \
        "cbench-hK <-> cbench-nK, bridge $BRIDGE ($NET.254), MTU $MTU" \
        "$( ((RANKS_PER_HOST == 1)) || echo "; $RANKS_PER_HOST ranks per namespace")"
      setup_network "$hosts" || die "cannot build the namespaces' network"
      netns_done=1
      for rate in $RATES; do
        shape_links "$rate" "$hosts" || die "cannot set tbf rate $rate"
        check_rate "$rate" "netns-$rate"
        for n in $RANKS; do
          local spread=$(((n + RANKS_PER_HOST - 1) / RANKS_PER_HOST))
          ((spread < 2)) || check_ring "$rate" "$spread" "netns-$rate.$n"
          banner "namespaces, link $rate, our tcp, $n ranks (cbench0..$((spread - 1)))"
          run_ours "netns-$rate.tcp.$n" "$n" 1 tcp
          if [[ $ucx_ours == 1 ]]; then
            banner "namespaces, link $rate, our ucx (UCX_TLS=tcp), $n ranks (cbench0..$((spread - 1)))"
            run_ours "netns-$rate.ucx.$n" "$n" 1 ucx tcp
          fi
          if [[ $mpi_ours == 1 ]]; then
            banner "namespaces, link $rate, our mpi, $n ranks (mpirun, btl self,tcp)"
            run_mpi_netns "netns-$rate.mpi.$n" "$n" mpi
          fi
          if [[ $mpi_native == 1 ]]; then
            banner "namespaces, link $rate, MPI_Allreduce, $n ranks (mpirun, btl self,tcp)"
            run_mpi_netns "netns-$rate.native-tcp.$n" "$n" native
          fi
          if [[ $mpi_ucx == 1 ]]; then
            banner "namespaces, link $rate, MPI_Allreduce, $n ranks (mpirun, pml ucx, UCX_TLS=tcp)"
            run_mpi_netns "netns-$rate.native-ucx.$n" "$n" native-ucx
          fi
        done
      done
    fi
  fi

  flag_on "$SKIP_LOOPBACK" || summary_loopback
  [[ $netns_done != 1 ]] || summary_netns
  [[ $ucx_ours != 1 ]] || summary_ucx "$netns_done"
  local failed=0 key
  for key in "$LOG_DIR"/*.cmd; do
    [[ -e $key ]] || continue
    key=$(basename "$key" .cmd)
    [[ -n ${RESULT_OK[$key]:-} ]] || failed=$((failed + 1))
  done
  ((failed == 0)) || {
    note "$failed run(s) failed (their logs: $LOG_DIR)"
    return 1
  }
}

main "$@"; exit $?  # one line: an edit of this file while it runs cannot derail bash
