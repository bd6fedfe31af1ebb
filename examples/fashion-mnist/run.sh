#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# From a fresh Debian 12 machine: installs the build dependencies and Fashion-MNIST, builds
# Cortado, and trains Caffe's LeNet on Fashion-MNIST with `cortado train` on the CPU, printing
# the test accuracy in Caffe's format. Extra arguments go to `cortado train`.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash .ci/install-deps.sh
bash .ci/build.sh -DBUILD_TESTS=OFF
examples/fashion-mnist/train.sh "$@"
