#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Whole training iterations over N ranks on "hosts" made of network namespaces, against the
# model of bench/scaling/model.py. H namespaces (cval0..) hang off one bridge (cval-br,
# 10.216.0.0/24) by veth pairs shaped with `tc tbf` on both ends; N `cortado train` ranks (the
# tcp backend, one CPU thread each) sit in them in blocks of N / H, so ranks of one namespace
# share a host (the hierarchical allreduce sums within it first). For every net, link rate and
# (ranks, hosts) it times:
#   compute  N independent `cortado train` processes at once in the same namespaces (no
#            communicator): their mean time per iteration under the same sharing of the cores
#   measured the N ranks training together (buckets overlapped with backward, the default)
# and writes one CSV row per point in the format of `model.py --validate` (ranks_per_host
# included; backward_share from bench/scaling/backward_share.sh, one process of one thread, run
# once per net and batch; machine_hosts, the namespaces sharing this machine's cores), then runs
# `model.py --validate` on it. The machine's cores are shared by all N
# ranks: where the ranks' compute, not the link, sets the time, the model (which gives each rank
# cores of its own for its communication) is not expected to hold; the summary says which points
# the link decides (the model's iteration at least LINK_BOUND times the compute, default 1.5).
#
# Needs root, iproute2 (ip, tc), python3, a build with the `cortado` tool:
#   bash bench/scaling/validate.sh                       # everything below, about 25 minutes
#   NETS="lenet:64" RATES=1gbit LAYOUTS="2:2" bash bench/scaling/validate.sh
# Env: BUILD_DIR (build), NETS ("lenet:64 cifar10_quick:100 caffenet:8 resnet50:4":
# model:batch of bench/models/<model>_train.prototxt), RATES ("1gbit 10gbit"; tc's units, e.g.
# 100mbit), LAYOUTS
# ("2:2 4:2 4:4 8:4": ranks:hosts), WARMUP (iterations before the timed ones, 3), ITERS (timed
# iterations of every net; default LeNet 50, CIFAR-10 quick 20, others 5), OUT (the CSV; default a file under the work
# directory, printed), LINK_BOUND (1.5), LOGS (a directory to keep every rank's log in, as
# <net>-<ranks>x<hosts>-<rate>-rank<r>.log; with CORTADO_LOG_LEVEL=debug each iteration's line
# says how long its exchange took and how much of it came after backward).
# Every namespace, link and process it makes is removed on exit, also on failure or Ctrl-C, and
# leftovers of an earlier run are removed first.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
# shellcheck source=bench/nets.sh
source bench/nets.sh
build=${BUILD_DIR:-build}
cortado=$build/cpp/tools/cortado
nets=${NETS:-"lenet:64 cifar10_quick:100 caffenet:8 resnet50:4"}
rates=${RATES:-"1gbit 10gbit"}
layouts=${LAYOUTS:-"2:2 4:2 4:4 8:4"}
warmup=${WARMUP:-3}
# Timed iterations per net: enough that a point spans about a second or more at 1 Gbit/s (with 5,
# LeNet's points moved by 10-20% between runs).
iters_of() {
  if [[ -n ${ITERS:-} ]]; then echo "$ITERS"; return; fi
  case $1 in
    lenet) echo 50 ;;
    cifar10_quick) echo 20 ;;
    *) echo 5 ;;
  esac
}
link_bound=${LINK_BOUND:-1.5}
net_prefix=10.216.0
bridge=cval-br

[[ -x $cortado ]] || { echo "missing $cortado: build first" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "needs root (network namespaces, veth, tc)" >&2; exit 1; }
command -v tc >/dev/null || { echo "needs iproute2 (ip, tc)" >&2; exit 1; }

work=$(mktemp -d)
out=${OUT:-$work/validation.csv}
bin_dir=$(cd "$build" && pwd)
cp "$cortado" "$work/cortado"  # so that pkill -f "$work" finds every rank
cortado=$work/cortado
max_hosts=0
for layout in $layouts; do
  hosts=${layout#*:}
  ((hosts > max_hosts)) && max_hosts=$hosts
done

remove_network() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cval[0-9]+$/ { print $1 }'); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^cval-h[0-9]+/ { sub(/@.*/, "", $2); print $2 }' |
    xargs -r -n1 ip link del 2>/dev/null || true
}
cleanup() {
  pkill -9 -f "$work/cortado" 2>/dev/null || true
  remove_network
  [[ -n ${OUT:-} ]] || cp "$out" "/tmp/cortado-validation.csv" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
remove_network

ip link add "$bridge" type bridge stp_state 0 forward_delay 0
ip addr add "$net_prefix.254/24" dev "$bridge"
ip link set "$bridge" up
for ((h = 0; h < max_hosts; h++)); do
  ip netns add "cval$h"
  ip link add "cval-h$h" type veth peer name "cval-n$h"
  ip link set "cval-n$h" netns "cval$h"
  ip link set "cval-h$h" master "$bridge"
  ip link set "cval-h$h" up
  ip -n "cval$h" link set lo up
  ip -n "cval$h" addr add "$net_prefix.$((h + 1))/24" dev "cval-n$h"
  ip -n "cval$h" link set "cval-n$h" up
done

# tbf on both ends of every link (the namespace sending, the bridge sending to it); the burst
# is 0.5 ms at the rate but at least 128 KiB, the queue 50 ms (as bench/comm/run.sh shapes).
shape() {
  local rate=$1 bps burst h
  bps=$(python3 -c "import sys; r = sys.argv[1]; print(int(float(r[:-4]) * {'g': 1e9, 'm': 1e6}[r[-4]]))" "$rate")
  burst=$(awk -v b="$bps" 'BEGIN { x = b / 8 * 0.0005; if (x < 131072) x = 131072; printf "%d", x }')
  for ((h = 0; h < max_hosts; h++)); do
    tc qdisc replace dev "cval-h$h" root tbf rate "$rate" burst "$burst" latency 50ms
    ip netns exec "cval$h" tc qdisc replace dev "cval-n$h" root tbf rate "$rate" burst "$burst" \
      latency 50ms
  done
}

export OMP_NUM_THREADS=1
export LD_LIBRARY_PATH=$bin_dir/cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# Milliseconds per iteration over the timed iterations: the last display's rate.
per_iter_ms() {
  iteration_seconds "$1" | awk '{ printf "%.2f", 1000 * $1 }'
}

# Waits for every process of `pids`; when one failed, shows the ends of the logs given and
# exits (uses model, n, hosts, rate of the loop).
wait_all() {
  local what=$1 pid failed=0
  shift
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  pids=()
  if ((failed)); then
    echo "$what failed ($model, $n ranks, $hosts hosts, $rate):" >&2
    tail -n 5 "$@" >&2
    exit 1
  fi
}

# The model's name of a bench/models net.
model_name() {
  case $1 in
    lenet) echo LeNet ;;
    cifar10_quick) echo "CIFAR-10 quick" ;;
    caffenet) echo CaffeNet ;;
    resnet50) echo ResNet-50 ;;
    *) echo "$1" ;;
  esac
}

# Backward's share of each net's iteration, measured once (one process, one thread).
declare -A shares
for spec in $nets; do
  shares[$spec]=$(NETS=$spec THREADS=1 BUILD_DIR=$build bash bench/scaling/backward_share.sh |
    tail -1 | cut -d, -f7)
done

echo "net,ranks,link_gbit,measured_ms,platform,wire,compute_ms,mode,ranks_per_host,backward_share,machine_hosts" >"$out"
printf '%-15s %5s %5s %6s | %11s %11s\n' net ranks hosts link "compute ms" "measured ms"
for rate in $rates; do
  shape "$rate"
  gbit=$(python3 -c "import sys; r = sys.argv[1]; print('%g' % (float(r[:-4]) * {'g': 1, 'm': 1e-3}[r[-4]]))" "$rate")
  latency_kb=$(python3 -c "
import sys; sys.path.insert(0, 'bench/scaling'); import model
print(max(1, round(model.LINK_BY_GBIT[$gbit].latency_bytes / 1024)))")
  for spec in $nets; do
    model=${spec%%:*}
    batch=${spec##*:}
    iters=$(iters_of "$model")
    net=$(net_model "bench/models/${model}_train.prototxt:$batch" "$work")
    solver=$work/${model}_$batch.solver
    # The display at iteration K * ITERS (K * ITERS - ITERS >= WARMUP) times the ITERS iterations
    # before it; it is printed once iteration K * ITERS runs, so max_iter is one more.
    warm=$(((warmup + iters - 1) / iters * iters))
    cat >"$solver" <<SOLVER
net: "$net"
base_lr: 0.0001 lr_policy: "fixed" momentum: 0.9 solver_mode: CPU random_seed: 1
display: $iters max_iter: $((warm + iters + 1)) snapshot_after_train: false
SOLVER
    for layout in $layouts; do
      n=${layout%%:*}
      hosts=${layout#*:}
      per_host=$((n / hosts))
      peers=
      for ((r = 0; r < n; r++)); do
        peers+="${peers:+,}$net_prefix.$((r / per_host + 1)):$((29800 + r))"
      done
      # compute: N processes at once, no communicator.
      pids=()
      for ((r = 0; r < n; r++)); do
        ip netns exec "cval$((r / per_host))" "$cortado" train --solver="$solver" --threads=1 \
          >"$work/alone$r.log" 2>&1 &
        pids+=($!)
      done
      wait_all "compute alone" "$work"/alone*.log
      # The mean over the N processes: one process alone varies with what the others do.
      compute=$(for ((r = 0; r < n; r++)); do per_iter_ms "$work/alone$r.log"; echo; done |
        awk 'NF { s += $1; c++ } END { if (c) printf "%.2f", s / c }')
      # measured: the N ranks together.
      for ((r = 0; r < n; r++)); do
        ip netns exec "cval$((r / per_host))" timeout 900 "$cortado" train --solver="$solver" \
          --threads=1 --world="$n" --rank="$r" --peers="$peers" --latency_kb="$latency_kb" \
          >"$work/rank$r.log" 2>&1 &
        pids+=($!)
      done
      wait_all "training" "$work"/rank*.log
      measured=$(per_iter_ms "$work/rank0.log")
      if [[ -n ${LOGS:-} ]]; then
        mkdir -p "$LOGS"
        for ((r = 0; r < n; r++)); do
          cp "$work/rank$r.log" "$LOGS/$model-${n}x$hosts-$rate-rank$r.log"
          cp "$work/alone$r.log" "$LOGS/$model-${n}x$hosts-$rate-alone$r.log"
        done
      fi
      printf '%-15s %5s %5s %6s | %11s %11s\n' "$model:$batch" "$n" "$hosts" "$rate" "$compute" \
        "$measured"
      echo "$(model_name "$model"),$n,$gbit,$measured,cpu,float32,$compute,overlap,$per_host,${shares[$spec]},$hosts" >>"$out"
    done
  done
done
echo
echo "CSV: $out${OUT:+}$([[ -n ${OUT:-} ]] || echo " (copied to /tmp/cortado-validation.csv on exit)")"
echo "link: tbf on both ends of each namespace's veth; one CPU thread per rank; --latency_kb as the model's alpha * rate"
echo
echo "== model against measured"
python3 bench/scaling/model.py --validate "$out" --link-bound "$link_bound"
