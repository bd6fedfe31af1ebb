#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Memory of one training iteration of a net, with the BatchNorm fusion and the shared gradient
# buffers off, then each on in turn. Run from the repository root after a build:
#   bash bench/nets/memory.sh [bench/models/resnet50_train.prototxt] [batch] [build/bench]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-bench/models/resnet50_train.prototxt}
batch=${2:-16}
bin=${3:-build/bench}/cortado_memory_bench
echo "# $(date -u +%F) $(uname -n), $model, batch $batch"
echo "# fuse share_diffs: result"
for setting in "0 0" "1 0" "1 1"; do
  read -r fuse share <<<"$setting"
  printf '%s %s: ' "$fuse" "$share"
  CORTADO_FUSE=$fuse CORTADO_SHARE_BUFFERS=$share "$bin" "$model" "$batch"
done
