#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Trains Caffe's LeNet on Fashion-MNIST with `cortado train`, on the CPU, for the solver's
# 10,000 iterations, then a batch-normalised LeNet (NET=bn). Run from the repository root:
#   examples/fashion-mnist/train.sh            # LeNet, Caffe's net and solver
#   NET=bn examples/fashion-mnist/train.sh     # the BatchNorm variant
#   NET=resnet examples/fashion-mnist/train.sh --gpu=0   # the small ResNet (solver_mode GPU)
#   RANKS=2 examples/fashion-mnist/train.sh    # 2 processes of batch 32 (64 in all), tcp ring
#   RANKS=2 LAUNCH=mpirun examples/fashion-mnist/train.sh   # the same under mpirun
# Needs Debian's dataset-fashion-mnist (IDX files in /usr/share/datasets/fashion-mnist) and a
# built `cortado` (on PATH, or in build/ or build-ci/).
set -euo pipefail
cd "$(dirname "$0")/../.."

dataset=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [[ ! -d $dataset ]]; then
  echo "Fashion-MNIST not found in $dataset: apt-get install dataset-fashion-mnist" >&2
  exit 1
fi
cortado=$(command -v cortado || true)
for candidate in build/cpp/tools/cortado build-ci/cpp/tools/cortado; do
  [[ -n $cortado ]] && break
  [[ -x $candidate ]] && cortado=$candidate
done
if [[ -z $cortado ]]; then
  echo "cortado not found: build it first (bash .ci/build.sh)" >&2
  exit 1
fi

data=examples/fashion-mnist/data
mkdir -p "$data"
for split in train t10k; do
  name=$([[ $split == train ]] && echo train || echo test)
  if [[ ! -d $data/fashion_mnist_${name}_lmdb ]]; then
    "$cortado" convert_idx --images="$dataset/$split-images-idx3-ubyte.gz" \
      --labels="$dataset/$split-labels-idx1-ubyte.gz" --out="$data/fashion_mnist_${name}_lmdb"
  fi
done

solver=examples/fashion-mnist/lenet_solver.prototxt
[[ ${NET:-lenet} == bn ]] && solver=examples/fashion-mnist/lenet_bn_solver.prototxt
[[ ${NET:-lenet} == resnet ]] && solver=examples/fashion-mnist/resnet_solver.prototxt
ranks=${RANKS:-1}
if ((ranks == 1)); then
  exec "$cortado" train --solver="$solver" "$@"
fi

# Several processes: the train batch is divided among them, so the total batch stays the
# solver's (64 for LeNet). The solver and net are copied with that one change.
net=$(sed -n 's/^net: "\(.*\)"/\1/p' "$solver")
batch=$(grep -m1 -o 'batch_size: [0-9]*' "$net" | grep -o '[0-9]*')
if ((batch % ranks != 0)); then
  echo "the train batch $batch does not divide among $ranks ranks" >&2
  exit 1
fi
base=$(basename "$solver" _solver.prototxt)_${ranks}ranks
# The first batch_size is the TRAIN phase's; the test batch is rank 0's alone and stays.
sed "0,/batch_size: $batch/s//batch_size: $((batch / ranks))/" "$net" >"$data/${base}_train_test.prototxt"
sed -e "s|^net: .*|net: \"$data/${base}_train_test.prototxt\"|" \
  -e "s|^snapshot_prefix: .*|snapshot_prefix: \"$data/$base\"|" "$solver" >"$data/${base}_solver.prototxt"
solver=$data/${base}_solver.prototxt
echo "$ranks ranks of batch $((batch / ranks)) ($batch in all): $solver"
# One CPU thread per rank unless --threads says otherwise (the ranks share this machine's cores).
threads=$(($(nproc) / ranks > 0 ? $(nproc) / ranks : 1))
if [[ ${LAUNCH:-tcp} == mpirun ]]; then
  exec mpirun --allow-run-as-root --oversubscribe -np "$ranks" \
    "$cortado" train --solver="$solver" --threads="$threads" "$@"
fi
port=${PORT:-29500}
peers=$(for ((r = 0; r < ranks; r++)); do printf '127.0.0.1:%d,' $((port + r)); done)
peers=${peers%,}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for ((r = 1; r < ranks; r++)); do
  "$cortado" train --solver="$solver" --threads="$threads" --world="$ranks" --rank="$r" \
    --peers="$peers" "$@" >"$data/${base}_rank$r.log" 2>&1 &
  pids+=($!)
done
"$cortado" train --solver="$solver" --threads="$threads" --world="$ranks" --rank=0 \
  --peers="$peers" "$@"
for pid in "${pids[@]}"; do wait "$pid"; done
pids=()
