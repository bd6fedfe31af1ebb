#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the build dependencies, builds Cortado, and times LeNet (batch 64) forward+backward
# on the CPU with `cortado time`, as `caffe time` does. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash .ci/install-deps.sh
bash .ci/build.sh -DBUILD_TESTS=OFF
build/cpp/tools/cortado time --model=examples/lenet/lenet.prototxt --iterations="${ITERATIONS:-50}"
