#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# GPU training throughput and memory, Cortado beside PyTorch on the same GPU in the same run. Run
# from the repository root on a machine with a GPU, PyTorch (with torchvision) and a CUDA build:
#   bash bench/gpu/run.sh [path/to/cortado_gpu_bench]
# SECTIONS (default "float32 tf32 amp search") picks the tables; "variants" adds ResNet-50 with
# the fusions, the shared buffers or the legacy cuDNN search turned off, Cortado alone;
# "recompute" ResNet-50 (float32 at batch 64, float16 at 128) with BatchNorm's outputs recomputed
# in Backward (the default) and kept (CORTADO_RECOMPUTE=0), Cortado alone.
#  - float32: both in strict float32 (Cortado's default; TF32 off in PyTorch), four nets.
#  - tf32: Cortado's `precision: TF32` beside PyTorch with TF32 on, CaffeNet and ResNet-50.
#  - amp: PyTorch's automatic mixed precision (float16 autocast, GradScaler, channels_last) on
#    ResNet-50 at batch 128 and CaffeNet at batch 256, beside Cortado in float32, TF32, float16
#    and bfloat16 (AMP_PRECISIONS picks; float16-floatblobs keeps the blobs in float32 between
#    layers as before half blobs, float16-all does too and runs the 1x1 convolutions in the half
#    type, float16-nchw and float16-nhwc put every convolution on the half blobs in that layout,
#    float16-nchwblobs keeps the half blobs NCHW rather than channels-last between convolutions).
#  - amp_rounds: ResNet-50 at batch 128, PyTorch AMP and Cortado float16 in turn, AMP_ROUNDS
#    (default 3) pairs, with the median ratio and the ratio against PyTorch's fastest round.
#  - search: Cortado with each convolution's cuDNN algorithm search given the whole 1 GiB limit
#    (CORTADO_CUDNN_SEARCH_SCALE=0) instead of a scratch sized to the layer.
# Peak memory: the most each allocated during the timed iterations, after the warm-up (PyTorch's
# torch.cuda.max_memory_allocated after reset_peak_memory_stats; Cortado's own counter, reset the
# same way); Cortado's run_peak_MiB also covers the warm-up with its cuDNN search.
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${1:-build/bench/cortado_gpu_bench}
sections=${SECTIONS:-float32 tf32 amp search}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

# bench/models/<net>_train.prototxt, with batch $2 when given (a copy in $work).
model() {
  local path=bench/models/$1_train.prototxt
  if [[ -n ${2:-} ]]; then
    # The first dim of the data and label shapes is the batch.
    python3 - "$path" "$2" >"$work/$1_$2.prototxt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
print(re.sub(r"shape \{ dim: \d+", "shape { dim: " + sys.argv[2], text))
PY
    path=$work/$1_$2.prototxt
  fi
  echo "$path"
}

header() {
  echo
  echo "== $1"
  printf '%-26s %6s %12s %12s %8s %10s %12s %12s\n' net batch cortado_img/s pytorch_img/s ratio \
    cortado_MiB cortado_run_MiB pytorch_MiB
}

# One row: label, Cortado's line, PyTorch's line (or "-").
row() {
  local label=$1 ours=$2 theirs=$3
  echo "# $ours" >&2
  echo "# $theirs" >&2
  local batch our_rate our_mem run_mem their_rate=- their_mem=- ratio=-
  read -r _ _ batch _ _ _ our_rate _ our_mem _ _ _ run_mem _ <<<"$ours"
  if [[ $theirs != - ]]; then
    read -r _ _ _ _ _ _ their_rate _ their_mem _ <<<"$theirs"
    ratio=$(python3 -c "print(f'{$our_rate / $their_rate:.2f}')")
  fi
  printf '%-26s %6s %12s %12s %8s %10s %12s %12s\n' "$label" "$batch" "$our_rate" "$their_rate" \
    "$ratio" "$our_mem" "$run_mem" "$their_mem"
}

for section in $sections; do
  case $section in
    float32)
      header "float32 (strict) on both sides"
      for net in lenet cifar10_quick caffenet resnet50; do
        row "$net" "$("$bench" "$(model $net)" 50 10 0 float32)" \
          "$(python3 bench/gpu/pytorch_train.py --mode=float32 $net)"
      done
      ;;
    tf32)
      header "TF32 on both sides"
      for net in caffenet resnet50; do
        row "$net" "$("$bench" "$(model $net)" 50 10 0 tf32)" \
          "$(python3 bench/gpu/pytorch_train.py --mode=tf32 $net)"
      done
      ;;
    amp)
      header "PyTorch AMP (float16, channels_last) beside Cortado float32, TF32, float16, bfloat16"
      for spec in "resnet50 128" "caffenet 256"; do
        read -r net batch <<<"$spec"
        theirs=$(python3 bench/gpu/pytorch_train.py --mode=amp --batch="$batch" $net)
        for choice in ${AMP_PRECISIONS:-float32 tf32 float16 bfloat16}; do
          # A precision and a variant: float16-floatblobs keeps every blob in float32 between
          # layers (CORTADO_HALF_TENSORS=0; then float16-all puts the 1x1 convolutions in
          # float16 too, CORTADO_HALF_CONVOLUTIONS=all); float16-nchw and float16-nhwc put every
          # convolution on the half blobs in that layout (CORTADO_HALF_CONV_LAYOUT; default auto);
          # float16-nchwblobs keeps every half blob NCHW (CORTADO_NHWC_BLOBS=0).
          precision=${choice%%-*}
          variant=${choice#"$precision"}
          row "$net $choice vs amp" "$(CORTADO_HALF_CONVOLUTIONS=${variant#-} \
            CORTADO_HALF_TENSORS=$([[ $variant == -floatblobs || $variant == -all ]] && echo 0 || echo 1) \
            CORTADO_HALF_CONV_LAYOUT=$([[ $variant == -nchw || $variant == -nhwc ]] && echo "${variant#-}" || echo auto) \
            CORTADO_NHWC_BLOBS=$([[ $variant == -nchwblobs ]] && echo 0 || echo 1) \
            "$bench" "$(model $net "$batch")" 50 10 0 "$precision")" "$theirs"
        done
      done
      ;;
    amp_rounds)
      # ResNet-50 at batch 128, PyTorch AMP and Cortado float16 in turn, AMP_ROUNDS times: either
      # side's rate can move between runs on one machine (PyTorch's by 15% between rounds), so
      # one pair decides little. Each pair's row, then the median of the pairs' ratios and our
      # median rate against PyTorch's fastest round.
      header "ResNet-50 float16 beside PyTorch AMP, in turn, ${AMP_ROUNDS:-3} rounds"
      path=$(model resnet50 128)
      rates=()
      for ((round = 1; round <= ${AMP_ROUNDS:-3}; ++round)); do
        theirs=$(python3 bench/gpu/pytorch_train.py --mode=amp --batch=128 resnet50)
        ours=$("$bench" "$path" 50 10 0 float16)
        row "resnet50 float16, round $round" "$ours" "$theirs"
        read -r _ _ _ _ _ _ our_rate _ <<<"$ours"
        read -r _ _ _ _ _ _ their_rate _ <<<"$theirs"
        rates+=("$our_rate,$their_rate")
      done
      python3 - "${rates[@]}" <<'PY'
import statistics, sys
pairs = [tuple(map(float, p.split(","))) for p in sys.argv[1:]]
ours = [o for o, _ in pairs]
theirs = [t for _, t in pairs]
print(f"median of the pairs' ratios: {statistics.median(o / t for o, t in pairs):.2f}; "
      f"our median {statistics.median(ours):.1f} img/s against PyTorch's fastest "
      f"{max(theirs):.1f}: {statistics.median(ours) / max(theirs):.2f}; "
      f"PyTorch's spread {min(theirs):.1f}-{max(theirs):.1f}, ours {min(ours):.1f}-{max(ours):.1f}")
PY
      ;;
    search)
      header "Cortado, cuDNN search with the whole 1 GiB for every shape (SEARCH_SCALE=0)"
      for net in caffenet resnet50; do
        row "$net" "$(CORTADO_CUDNN_SEARCH_SCALE=0 "$bench" "$(model $net)" 50 10)" -
      done
      ;;
    variants)
      header "Cortado ResNet-50 with one setting changed"
      for setting in CORTADO_FUSE=0 CORTADO_SHARE_BUFFERS=0 CORTADO_CUDNN_API=graph; do
        row "resnet50 ${setting#CORTADO_}" \
          "$(env "$setting" "$bench" bench/models/resnet50_train.prototxt 50 10)" -
      done
      ;;
    recompute)
      header "Cortado ResNet-50, BatchNorm outputs recomputed in Backward (default) or kept (RECOMPUTE=0)"
      for spec in "64 float32" "128 float16"; do
        read -r batch precision <<<"$spec"
        for setting in CORTADO_RECOMPUTE=1 CORTADO_RECOMPUTE=0; do
          row "resnet50 $precision ${setting#CORTADO_}" \
            "$(env "$setting" "$bench" "$(model resnet50 "$batch")" 50 10 0 "$precision")" -
        done
      done
      ;;
    *)
      echo "unknown section '$section' (float32 tf32 amp amp_rounds search variants recompute)" >&2
      exit 2
      ;;
  esac
done
