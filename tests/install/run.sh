#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The plain CMake build as a user types it: CMake's default generator (Unix Makefiles) builds the
# library and the tool, `cmake --install` installs them with the headers and cortado.pc, and a
# program compiled with `pkg-config --cflags --libs cortado` runs against the installed copy.
# Usage (from the repository root): bash tests/install/run.sh [build dir] [install prefix]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-make}
prefix=${2:-$PWD/$build/installed}
cmake -S . -B "$build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release -DWITH_CUDA=OFF \
  -DBUILD_TESTS=OFF -DCMAKE_INSTALL_PREFIX="$prefix"
cmake --build "$build" -j "$(nproc)"
cmake --install "$build"
"$prefix/bin/cortado" --help >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig:$prefix/lib64/pkgconfig
# shellcheck disable=SC2046
c++ -o "$build/consumer" tests/install/consumer.cpp $(pkg-config --cflags --libs cortado)
out=$("$build/consumer")
echo "installed library ran a net: $out"
[[ $out == "2 4 6" ]]
echo "install check passed"
