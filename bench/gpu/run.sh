#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GPU training throughput, Cortado beside PyTorch on the same GPU in the same run, then ResNet-50
# with each of three settings changed (see below). Run from the repository root on a machine with
# a GPU, PyTorch (with torchvision) and a CUDA build:
#   bash bench/gpu/run.sh [path/to/cortado_gpu_bench]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${1:-build/bench/cortado_gpu_bench}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
printf '%-16s %6s %12s %12s %8s %12s %12s\n' net batch cortado_img/s pytorch_img/s ratio \
  cortado_MiB pytorch_MiB
for net in lenet cifar10_quick caffenet resnet50; do
  ours=$("$bench" "bench/models/${net}_train.prototxt" 50 10)
  theirs=$(python3 bench/gpu/pytorch_train.py "$net")
  echo "# $ours" >&2
  echo "# $theirs" >&2
  read -r _ _ batch _ _ _ our_rate _ our_mem _ <<<"$ours"
  read -r _ _ _ _ _ _ their_rate _ their_mem _ <<<"$theirs"
  ratio=$(python3 -c "print(f'{$our_rate / $their_rate:.2f}')")
  printf '%-16s %6s %12s %12s %8s %12s %12s\n' "$net" "$batch" "$our_rate" "$their_rate" \
    "$ratio" "$our_mem" "$their_mem"
done
# ResNet-50 again with the fusions, then the shared buffers off, then with cuDNN's graph API
# engines in place of its legacy algorithm search, Cortado alone: what each is worth on this GPU
# (compare with the resnet50 row above).
for setting in "CORTADO_FUSE=0" "CORTADO_SHARE_BUFFERS=0" "CORTADO_CUDNN_API=graph"; do
  ours=$(env "$setting" "$bench" bench/models/resnet50_train.prototxt 50 10)
  echo "# $setting: $ours" >&2
  read -r _ _ batch _ _ _ our_rate _ our_mem _ <<<"$ours"
  printf '%-16s %6s %12s %12s %8s %12s %12s\n' "resnet50 ${setting#CORTADO_}" "$batch" \
    "$our_rate" - - "$our_mem" -
done
