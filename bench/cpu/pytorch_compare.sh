#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Whole-net CPU training steps, Cortado against PyTorch, in the same run: for each net and
# thread count, `cortado train` (forward, backward and the SGD update with momentum and weight
# decay, through a solver over the net's Input layers) and PyTorch (bench/cpu/torch_net.py: the
# same net built from the prototxt, the same step with torch.optim.SGD) in its default layout
# and in channels_last, alternating ROUNDS times, the best mean kept. Prints a markdown table of
# ms per training step and Cortado's time over each PyTorch layout's and over the faster of them
# (the goal: at most 0.7). The peer of bench/cpu/caffe_compare.sh, which times against Caffe.
#
#   bash bench/cpu/pytorch_compare.sh
#   NETS="bench/models/resnet50_train.prototxt:8" THREADS=2 ROUNDS=3 bash bench/cpu/pytorch_compare.sh
#
# NETS     prototxt[:batch] (default: LeNet, CIFAR-10 quick, MobileNet v1 and ResNet-50 at batch 8)
# THREADS  thread counts (default "1 2")         ROUNDS  alternated runs per tool (default 2)
# ITERS    timed steps per run: "net=N ..." by base name (default lenet_train=200
#          cifar10_quick_train=100, else 8); WARMUP untimed steps first (default 3)
# CORTADO  the cortado binary (default build/cpp/tools/cortado)
# PYTHON   a Python with torch (default /usr/bin/python3; Debian's python3-torch)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CORTADO=${CORTADO:-$ROOT/build/cpp/tools/cortado}
PYTHON=${PYTHON:-/usr/bin/python3}
NETS=${NETS:-"bench/models/lenet_train.prototxt bench/models/cifar10_quick_train.prototxt bench/models/mobilenet_v1_train.prototxt:8 bench/models/resnet50_train.prototxt:8"}
THREADS=${THREADS:-1 2}
ROUNDS=${ROUNDS:-2}
WARMUP=${WARMUP:-3}

[[ -x $CORTADO ]] || { echo "missing binary: $CORTADO (build first)" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null || {
  echo "no torch in $PYTHON: apt-get install python3-torch" >&2; exit 1; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
# shellcheck source=bench/nets.sh
source "$ROOT/bench/nets.sh"

iters_of() {  # net base name
  local spec
  for spec in ${ITERS:-lenet_train=200 cifar10_quick_train=100}; do
    [[ ${spec%%=*} == "$1" ]] && { echo "${spec#*=}"; return; }
  done
  echo 8
}

# Mean ms of the training steps after WARMUP: the solver displays every step, and each display
# line gives the seconds since the one before ("Iteration 5 (..., 0.0123s/1 iters)").
cortado_ms() {  # model iters threads
  cat >"$TMP/solver.prototxt" <<EOF
net: "$1"
base_lr: 0.001
momentum: 0.9
weight_decay: 0.0005
lr_policy: "fixed"
max_iter: $((WARMUP + $2 + 1))
display: 1
snapshot_after_train: false
random_seed: 1
EOF
  "$CORTADO" train --solver="$TMP/solver.prototxt" --threads="$3" >"$TMP/c.log" 2>&1 || {
    tail -5 "$TMP/c.log" >&2; return 1; }
  awk -v w="$WARMUP" '/Iteration [0-9]+ \(.*s\/1 iters\)/ {
         split($0, a, "Iteration "); split(a[2], b, " "); if (b[1] + 0 <= w) next
         match($0, /[0-9.e+-]+s\/1 iters/); s += substr($0, RSTART, RLENGTH - 8); n++ }
       END { if (n) printf "%.3f\n", 1000 * s / n }' "$TMP/c.log"
}

torch_ms() {  # model iters threads [--channels-last]
  "$PYTHON" "$ROOT/bench/cpu/torch_net.py" "$1" --iters="$2" --warmup="$WARMUP" \
    --threads="$3" ${4:+"$4"} >"$TMP/t.log" 2>&1 || { tail -5 "$TMP/t.log" >&2; return 1; }
  grep -oE 'ms_per_iter=[0-9.]+' "$TMP/t.log" | cut -d= -f2
}

min() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 <= b + 0) print a; else print b }'; }

rows=()
for spec in $NETS; do
  model=$(net_model "$spec" "$TMP")
  name=$(basename "$model" .prototxt)
  batch=$(grep -oE 'shape *\{ *dim: *[0-9]+' "$model" | head -1 | grep -oE '[0-9]+$')
  iters=$(iters_of "$name")
  for t in $THREADS; do
    c="" p="" l=""
    for _ in $(seq "$ROUNDS"); do
      c=$(min "$c" "$(cortado_ms "$model" "$iters" "$t" || true)")
      p=$(min "$p" "$(torch_ms "$model" "$iters" "$t" || true)")
      l=$(min "$l" "$(torch_ms "$model" "$iters" "$t" --channels-last || true)")
    done
    best=$(min "$p" "$l")
    ratio() { [[ -n $1 && -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }' || echo -; }
    rows+=("| $name | $batch | $t | ${c:--} | ${p:--} | ${l:--} | $(ratio "$c" "$p") | $(ratio "$c" "$l") | **$(ratio "$c" "$best")** |")
  done
done

echo "PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)'), steps timed: per net (warm-up $WARMUP), rounds: $ROUNDS (best mean kept), $(date -u +%F), $(nproc) cores"
echo
echo "| net | batch | threads | Cortado ms/step | PyTorch ms/step | PyTorch channels_last | Cortado/PyTorch | Cortado/channels_last | Cortado/faster |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
