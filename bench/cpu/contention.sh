#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Training on cores shared with other work: for each net, `cortado time` (forward and backward)
# and PyTorch (bench/cpu/torch_net.py: the same net built from the prototxt, forward, backward
# and an SGD step) with THREADS threads, alone and beside 2 and 4 busy loops (BUSY), the two
# alternating in the same run. Prints a markdown table: ms per iteration, the rate kept against
# the quiet rate, and that against the fair share, cores / (cores + busy loops) of the quiet rate
# (the goal: at least 0.9 of it).
#
#   bash bench/cpu/contention.sh
#   NETS="bench/models/lenet_train.prototxt" BUSY="0 2" bash bench/cpu/contention.sh
#   OMP_WAIT_POLICY=active bash bench/cpu/contention.sh   # OpenMP's threads spinning
#
# NETS     prototxt[:batch] (default: LeNet, ResNet-50 at batch 8)
# ITERS    timed iterations: "net=N ..." per net base name (default lenet_train=200, else 4)
# THREADS  CPU threads of both (default 2)        BUSY  busy-loop counts (default "0 2 4")
# CORTADO  the cortado binary (default build/cpp/tools/cortado)
# PYTHON   a Python with torch (default /usr/bin/python3; Debian's python3-torch)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CORTADO=${CORTADO:-$ROOT/build/cpp/tools/cortado}
PYTHON=${PYTHON:-/usr/bin/python3}
NETS=${NETS:-"bench/models/lenet_train.prototxt bench/models/resnet50_train.prototxt:8"}
THREADS=${THREADS:-2}
BUSY=${BUSY:-0 2 4}
CORES=$(nproc)

[[ -x $CORTADO ]] || { echo "missing binary: $CORTADO (build first)" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null || {
  echo "no torch in $PYTHON: apt-get install python3-torch" >&2; exit 1; }

TMP=$(mktemp -d)
# shellcheck source=bench/busy_loops.sh
source "$ROOT/bench/busy_loops.sh"
# shellcheck source=bench/nets.sh
source "$ROOT/bench/nets.sh"
trap 'stop_loops; rm -rf "$TMP"' EXIT

iters_of() {  # net base name
  local spec
  for spec in ${ITERS:-lenet_train=200}; do
    [[ ${spec%%=*} == "$1" ]] && { echo "${spec#*=}"; return; }
  done
  echo 4
}

cortado_ms() {  # model iters
  "$CORTADO" time --model="$1" --iterations="$2" --threads="$THREADS" >"$TMP/c.log" 2>&1 || {
    tail -5 "$TMP/c.log" >&2; return 1; }
  awk '/Average Forward pass:/ { f = $(NF - 1) } /Average Backward pass:/ { b = $(NF - 1) }
       END { printf "%.3f\n", f + b }' "$TMP/c.log"
}

torch_ms() {  # model iters
  "$PYTHON" "$ROOT/bench/cpu/torch_net.py" "$1" --iters="$2" --threads="$THREADS" \
    >"$TMP/t.log" 2>&1 || { tail -5 "$TMP/t.log" >&2; return 1; }
  sed -n 's/.*ms_per_iter=\([0-9.]*\).*/\1/p' "$TMP/t.log"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "Contention: $CORES cores, $THREADS threads each, $(date -u +%F), $(uname -n)"
echo "OpenMP waits: OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-unset}"
echo
echo "| net | busy loops | fair share | Cortado ms/iter | Cortado rate kept | Cortado / fair share | PyTorch ms/iter | PyTorch rate kept | PyTorch / fair share |"
echo "|---|---|---|---|---|---|---|---|---|"
for spec in $NETS; do
  model=$(net_model "$spec" "$TMP")
  name=$(basename "$model" .prototxt)
  iters=$(iters_of "$name")
  quiet_c="" quiet_t=""
  for busy in $BUSY; do
    start_loops "$busy"
    # Alternate which goes first, so that neither always meets a fresher machine.
    if ((busy % 4 == 0)); then
      c=$(cortado_ms "$model" "$iters"); t=$(torch_ms "$model" "$iters")
    else
      t=$(torch_ms "$model" "$iters"); c=$(cortado_ms "$model" "$iters")
    fi
    stop_loops
    [[ -n $quiet_c ]] || { quiet_c=$c; quiet_t=$t; }
    fair=$(awk -v c="$CORES" -v b="$busy" 'BEGIN { printf "%.2f", c / (c + b) }')
    kept_c=$(ratio "$quiet_c" "$c"); kept_t=$(ratio "$quiet_t" "$t")
    echo "| $name | $busy | $fair | $c | $kept_c | $(ratio "$kept_c" "$fair") | $t | $kept_t | $(ratio "$kept_t" "$fair") |"
  done
done
