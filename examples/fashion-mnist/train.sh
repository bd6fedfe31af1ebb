#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Trains Caffe's LeNet on Fashion-MNIST with `cortado train`, on the CPU, for the solver's
# 10,000 iterations, then a batch-normalised LeNet (NET=bn). Run from the repository root:
#   examples/fashion-mnist/train.sh            # LeNet, Caffe's net and solver
#   NET=bn examples/fashion-mnist/train.sh     # the BatchNorm variant
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
"$cortado" train --solver="$solver" "$@"
