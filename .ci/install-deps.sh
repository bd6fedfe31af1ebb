#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages Cortado builds and tests with (Debian 12, run as root or with sudo).
# Safe to run again: apt skips what is already installed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev
  libopenblas-openmp-dev libdnnl-dev
  libhdf5-dev liblmdb-dev libjpeg62-turbo-dev libpng-dev
  libopenmpi-dev openmpi-bin libibverbs-dev libucx-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-format-14
  libonnx-dev python3-onnx python3-opencv
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The JNI shim and scala-bridge need a JDK (17 or newer) and Maven; any installed ones will do.
command -v javac >/dev/null || missing+=(default-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
if ((${#missing[@]})); then
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  echo "Installing: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
