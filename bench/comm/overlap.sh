#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Does the gradient exchange hide behind backward? Two `cortado train` ranks in two network
# namespaces joined by a veth pair shaped with `tc ... tbf` (1 Gbit/s by default), one CPU
# thread each, on nets with Input layers (bench/models). For each net it prints the time per
# iteration of:
#   compute alone   two independent processes at once, no communicator (the same sharing of
#                   the cores as the two ranks)
#   allreduce alone cortado_comm_bench over the shaped link, at the net's gradient size
#   overlap on      2 ranks, buckets exchanged while backward runs (the default)
#   overlap off     2 ranks, --overlap=false: the whole buffer after backward
# and (overlap on) / max(compute, allreduce). Needs root, iproute2; run from the repository root
# after building with -DBUILD_BENCH=ON:
#   bash bench/comm/overlap.sh
# Env: BUILD_DIR (build), RATE (1gbit), ITERS (iterations timed per run, 20), BUCKET_MB (25), NETS
# ("cifar10_quick:100 cifar10_quick:8 caffenet:8": model:batch), EXCHANGE (float32; bfloat16 or
# float16: the ranks' --exchange_precision and the allreduce's --wire).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
# shellcheck source=bench/nets.sh
source bench/nets.sh
build=${BUILD_DIR:-build}
cortado=$build/cpp/tools/cortado
bench=$build/bench/comm/cortado_comm_bench
rate=${RATE:-1gbit}
iters=${ITERS:-20}
bucket_mb=${BUCKET_MB:-25}
exchange=${EXCHANGE:-float32}
nets=${NETS:-"cifar10_quick:100 cifar10_quick:8 caffenet:8"}
for tool in "$cortado" "$bench"; do
  [[ -x $tool ]] || { echo "missing $tool: build with -DBUILD_BENCH=ON" >&2; exit 1; }
done
command -v tc >/dev/null || { echo "needs iproute2 (ip, tc)" >&2; exit 1; }

ns0=covl0 ns1=covl1 ip0=10.214.0.1 ip1=10.214.0.2
work=$(mktemp -d)
cleanup() {
  pkill -f "$work" 2>/dev/null || true
  ip netns del $ns0 2>/dev/null || true
  ip netns del $ns1 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cleanup_old() { ip netns del $ns0 2>/dev/null || true; ip netns del $ns1 2>/dev/null || true; }
cleanup_old
ip netns add $ns0
ip netns add $ns1
ip link add covl-a netns $ns0 type veth peer name covl-b netns $ns1
ip -n $ns0 addr add $ip0/24 dev covl-a
ip -n $ns1 addr add $ip1/24 dev covl-b
for ns in $ns0 $ns1; do
  ip -n $ns link set lo up
  dev=$([[ $ns == "$ns0" ]] && echo covl-a || echo covl-b)
  ip -n $ns link set $dev up
  # Both directions shaped: each side's egress. A burst of a few ms at the rate.
  tc -n $ns qdisc add dev $dev root tbf rate "$rate" burst 512kb latency 50ms
done
bin_dir=$(cd "$build" && pwd)
cp "$cortado" "$bench" "$work/"   # so that pkill -f "$work" finds them
cortado=$work/cortado
bench=$work/cortado_comm_bench
export OMP_NUM_THREADS=1
export LD_LIBRARY_PATH=$bin_dir/cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The seconds per iteration of the last display line of a log.
per_iter() {
  iteration_seconds "$1" | awk '{ printf "%.4f", $1 }'
}

printf '%-16s %6s %10s | %12s %12s %12s %12s | %s\n' net batch "grad MB" "compute s" \
  "allreduce s" "overlap on" "overlap off" "on / max(compute, allreduce)"
for spec in $nets; do
  model=${spec%%:*}
  batch=${spec##*:}
  net=$(net_model "bench/models/${model}_train.prototxt:$batch" "$work")
  solver=$work/${model}_$batch.solver
  # Warm-up iterations, then one display over the timed ones.
  cat >"$solver" <<SOLVER
net: "$net"
base_lr: 0.0001 lr_policy: "fixed" momentum: 0.9 solver_mode: CPU random_seed: 1
display: $iters max_iter: $((2 * iters)) snapshot_after_train: false
SOLVER
  # Two independent processes at once, as the two ranks share the cores: compute alone is
  # measured under the same sharing of cores, caches and memory.
  ip netns exec $ns1 "$cortado" train --solver="$solver" --threads=1 >"$work/alone1.log" 2>&1 &
  ip netns exec $ns0 "$cortado" train --solver="$solver" --threads=1 >"$work/alone.log" 2>&1
  wait
  compute=$(per_iter "$work/alone.log")
  run_two() {
    local extra=$1 log=$2
    ip netns exec $ns1 "$cortado" train --solver="$solver" --threads=1 --world=2 --rank=1 \
      --peers=$ip0:29700,$ip1:29700 --bucket_mb=$bucket_mb --exchange_precision=$exchange \
      $extra >"$log.1" 2>&1 &
    ip netns exec $ns0 "$cortado" train --solver="$solver" --threads=1 --world=2 --rank=0 \
      --peers=$ip0:29700,$ip1:29700 --bucket_mb=$bucket_mb --exchange_precision=$exchange \
      $extra >"$log" 2>&1
    wait
  }
  run_two "" "$work/on.log"
  on=$(per_iter "$work/on.log")
  run_two "--overlap=false" "$work/off.log"
  off=$(per_iter "$work/off.log")
  floats=$(sed -n 's/.*Gradients of \([0-9]*\) floats.*/\1/p' "$work/on.log" | head -1)
  bytes=$((floats * 4))
  ip netns exec $ns1 "$bench" --rank=1 --world=2 --peers=$ip0:29701,$ip1:29701 \
    --min-bytes=$bytes --max-bytes=$bytes --iters=5 --wire=$exchange >/dev/null 2>&1 &
  ip netns exec $ns0 "$bench" --rank=0 --world=2 --peers=$ip0:29701,$ip1:29701 \
    --min-bytes=$bytes --max-bytes=$bytes --iters=5 --wire=$exchange >"$work/bench.log" 2>&1
  wait
  # The table's time column is in microseconds.
  allreduce=$(awk -v b=$bytes '$1 == b { printf "%.4f", $3 / 1e6 }' "$work/bench.log")
  ratio=$(awk -v on="$on" -v c="$compute" -v a="$allreduce" \
    'BEGIN { m = c > a ? c : a; printf "%.2f", on / m }')
  printf '%-16s %6s %10.1f | %12s %12s %12s %12s | %s\n' "$model" "$batch" \
    "$(awk -v b=$bytes 'BEGIN { print b / 1048576 }')" "$compute" "$allreduce" "$on" "$off" "$ratio"
done
echo "link: $rate each way (tc tbf on both ends of one veth pair); one CPU thread per rank; buckets of $bucket_mb MB; gradients as $exchange"
