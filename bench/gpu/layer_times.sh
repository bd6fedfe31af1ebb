#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where a net's GPU time goes: `cortado time` on one GPU, summed per layer type (forward and
# backward, ms per iteration; "Split" for the splits the net inserts). Layers fused into another
# count with it (BatchNorm absorbs its Scale and ReLU, Eltwise its ReLU).
#   bash bench/gpu/layer_times.sh bench/models/resnet50_train.prototxt 128 float16 [cortado]
# prototxt with Input layers; batch replaces the first dim of each Input shape; precision is
# cortado's --precision (float32, tf32, float16, bfloat16). DEVICE_FLAGS (default --gpu=0)
# replaces the device flag, e.g. DEVICE_FLAGS=--threads=2 for the CPU.
set -euo pipefail
net=$1 batch=$2 precision=${3:-float32}
cortado=${4:-build/cpp/tools/cortado}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
sed -E "s/shape *\{ *dim: *[0-9]+/shape { dim: $batch/g" "$net" >"$work/net.prototxt"
sed 's/#.*//' "$work/net.prototxt" | tr '\n' ' ' | sed 's/layer *{/\n&/g' | awk '
  /^layer/ { n = t = "";
    if (match($0, /name: *"[^"]*"/)) { n = substr($0, RSTART, RLENGTH); sub(/name: *"/, "", n); sub(/"$/, "", n) }
    if (match($0, /type: *"[^"]*"/)) { t = substr($0, RSTART, RLENGTH); sub(/type: *"/, "", t); sub(/"$/, "", t) }
    if (n != "") print n, t }' >"$work/types.txt"
"$cortado" time --model="$work/net.prototxt" ${DEVICE_FLAGS:---gpu=0} --precision="$precision" --iterations=20 \
  >"$work/time.log" 2>&1 || { tail -5 "$work/time.log" >&2; exit 1; }
grep -E "Average (Forward|Backward|Forward-Backward)" "$work/time.log" | sed 's/.*\] //'
printf '%-18s %10s %10s\n' type forward_ms backward_ms
awk 'NR == FNR { t[$1] = $2; next }
     /\tforward:|\tbackward:/ { split($0, a, "]"); split(a[2], b, "\t"); l = b[1]; gsub(/ /, "", l)
       ty = (l in t) ? t[l] : "Split"; ms = $(NF - 1)
       if ($0 ~ /forward:/) f[ty] += ms; else bk[ty] += ms }
     END { for (k in f) printf "%-18s %10.2f %10.2f\n", k, f[k], bk[k] }' \
  "$work/types.txt" "$work/time.log" | sort -k2 -nr
