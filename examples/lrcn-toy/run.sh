#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The LRCN toy task (README.md): generates the sentences and images, trains the net with
# `cortado train` on the CPU, and prints the test accuracy of the last pass. Run from the
# repository root after a build (bash .ci/build.sh):
#   examples/lrcn-toy/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

find_built() {
  for candidate in "build/$1" "build-ci/$1"; do
    [[ -x $candidate ]] && { echo "$candidate"; return; }
  done
  echo "$2 not found: build it first (bash .ci/build.sh)" >&2
  exit 1
}
cortado=$(command -v cortado || find_built cpp/tools/cortado cortado)
make_sequences=$(find_built examples/lrcn-toy/lrcn_toy_make_sequences lrcn_toy_make_sequences)

data=examples/lrcn-toy/data
mkdir -p "$data"
# 400 training batches of 16 sentences, 25 test batches.
"$make_sequences" "$data" 400 25 16
"$cortado" train --solver=examples/lrcn-toy/lrcn_toy_solver.prototxt 2>&1 | tee "$data/train.log"
grep "Test net output.*accuracy" "$data/train.log" | tail -1
