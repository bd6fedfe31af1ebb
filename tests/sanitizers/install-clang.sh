#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs Debian's clang 14 with its sanitizer and libFuzzer runtimes and OpenMP, for
# tests/sanitizers/run.sh and tests/fuzz/run.sh. Safe to run again.
set -euo pipefail
packages=(clang-14 libclang-rt-14-dev libomp-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  echo "Installing: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends \
    "${missing[@]}"
fi
