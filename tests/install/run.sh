#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The plain CMake build as a user types it: CMake's default generator (Unix Makefiles) builds the
# library and the tool, `cmake --install` installs them with the headers and cortado.pc, and a
# program compiled with `pkg-config --cflags --libs cortado` runs against the installed copy.
# With REUSE=1 the build directory is one already built (CI's own, Ninja, with CUDA): only the
# install and the program are checked, without a second build of the library.
# Usage (from the repository root): [REUSE=1] bash tests/install/run.sh [build dir] [prefix]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-make}
prefix=${2:-$PWD/$build/installed}
if [[ ${REUSE:-0} == 1 ]]; then
  [[ -f $build/CMakeCache.txt ]] || { echo "REUSE=1: $build is not a build directory" >&2; exit 1; }
  echo "installing the build in $build"
else
  cmake -S . -B "$build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release -DWITH_CUDA=OFF \
    -DBUILD_TESTS=OFF -DCMAKE_INSTALL_PREFIX="$prefix"
  cmake --build "$build" -j "$(nproc)"
fi
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix"
# A build with CUDA needs the toolkit's runtime where its programs run (the installed library's
# RPATH names the toolkit's directory; this covers a toolkit found elsewhere at build time).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
"$prefix/bin/cortado" --help >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig:$prefix/lib64/pkgconfig
# shellcheck disable=SC2046
c++ -o "$build/consumer" tests/install/consumer.cpp $(pkg-config --cflags --libs cortado)
out=$("$build/consumer")
echo "installed library ran a net: $out"
[[ $out == "2 4 6" ]]
echo "install check passed"
