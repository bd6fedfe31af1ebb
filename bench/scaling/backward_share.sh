#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# How much of one training iteration is backward: the window in which the gradient exchange can
# overlap (bench/scaling/model.py's BACKWARD_SHARE). For each net of bench/models at a batch, one
# process with THREADS CPU threads: `cortado time` gives the forward and backward passes, a short
# `cortado train` (SGD with momentum, as the validation runs) the whole iteration; the update
# and the rest are the difference. Prints one line per net:
#   net,batch,threads,forward_ms,backward_ms,iteration_ms,backward_share
#
#   bash bench/scaling/backward_share.sh                       # the nets below, 1 thread
#   NETS="caffenet:32 resnet50:8" THREADS=2 bash bench/scaling/backward_share.sh
# Env: BUILD_DIR (build), NETS ("lenet:64 cifar10_quick:100 caffenet:8 caffenet:32"), THREADS (1),
# ITERS (timed iterations of each, 10).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
# shellcheck source=bench/nets.sh
source bench/nets.sh
build=${BUILD_DIR:-build}
cortado=$build/cpp/tools/cortado
nets=${NETS:-"lenet:64 cifar10_quick:100 caffenet:8 caffenet:32"}
threads=${THREADS:-1}
iters=${ITERS:-10}
[[ -x $cortado ]] || { echo "missing $cortado: build first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=$threads
export LD_LIBRARY_PATH=$build/cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

echo "net,batch,threads,forward_ms,backward_ms,iteration_ms,backward_share"
for spec in $nets; do
  model=${spec%%:*}
  batch=${spec##*:}
  net=$(net_model "bench/models/${model}_train.prototxt:$batch" "$work")
  "$cortado" time --model="$net" --iterations="$iters" --threads="$threads" >"$work/time.log" 2>&1
  forward=$(sed -n 's/.*Average Forward pass: \([0-9.]*\) ms.*/\1/p' "$work/time.log")
  backward=$(sed -n 's/.*Average Backward pass: \([0-9.]*\) ms.*/\1/p' "$work/time.log")
  # The display after the warm-up iterations times the ITERS iterations before it.
  cat >"$work/solver.prototxt" <<SOLVER
net: "$net"
base_lr: 0.0001 lr_policy: "fixed" momentum: 0.9 solver_mode: CPU random_seed: 1
display: $iters max_iter: $((2 * iters + 1)) snapshot_after_train: false
SOLVER
  "$cortado" train --solver="$work/solver.prototxt" --threads="$threads" >"$work/train.log" 2>&1
  iteration=$(iteration_seconds "$work/train.log" | awk '{ printf "%.2f", 1000 * $1 }')
  if [[ -z $forward || -z $backward || -z $iteration ]]; then
    echo "$model:$batch: no timing found; the logs end:" >&2
    tail -n 3 "$work/time.log" "$work/train.log" >&2
    exit 1
  fi
  awk -v n="$model" -v b="$batch" -v t="$threads" -v f="$forward" -v w="$backward" \
    -v i="$iteration" 'BEGIN { printf "%s,%s,%s,%.2f,%.2f,%.2f,%.3f\n", n, b, t, f, w, i, w / i }'
done
