#!/usr/bin/env bash
# Builds BVLC Caffe (CPU only, OpenBLAS) outside the repository, as the peer that
# bench/cpu/caffe_compare.sh times against Cortado. Caffe's code never enters this tree.
#
#   bash bench/cpu/build_caffe.sh
#   CAFFE_SRC=/path/to/caffe CAFFE_BUILD=/tmp/caffe-build JOBS=1 bash bench/cpu/build_caffe.sh
#
# CAFFE_SRC    an existing Caffe source tree to build (copied first, left untouched);
#              unset: clone https://github.com/BVLC/caffe at CAFFE_COMMIT
# CAFFE_BUILD  where the patched copy and the build go (default /work/caffe-build)
# JOBS         build parallelism (default: nproc)
# SKIP_APT=1   skip the apt-get step
# Prints the path of the `caffe` binary on its last line.
set -euo pipefail

CAFFE_COMMIT=${CAFFE_COMMIT:-9b891540183ddc834a02b2bd81b31afae71b2153}  # master, 2020-02-13
CAFFE_BUILD=${CAFFE_BUILD:-/work/caffe-build}
JOBS=${JOBS:-$(nproc)}
SRC=$CAFFE_BUILD/src

if [[ -z ${SKIP_APT:-} ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends build-essential cmake git \
    libboost-system-dev libboost-thread-dev libboost-filesystem-dev \
    libgoogle-glog-dev libgflags-dev libprotobuf-dev protobuf-compiler \
    libhdf5-dev libopenblas-dev >/dev/null
fi

# A fresh copy each time, so the edits below apply to pristine sources.
rm -rf "$SRC"
mkdir -p "$CAFFE_BUILD"
if [[ -n ${CAFFE_SRC:-} ]]; then
  cp -a "$CAFFE_SRC" "$SRC"
else
  git clone -q https://github.com/BVLC/caffe "$SRC"
  git -C "$SRC" checkout -q "$CAFFE_COMMIT"
fi

# Build fixes for Debian 12 (protobuf 3.21, GCC 12):
# protobuf >= 3.11 dropped the warning-threshold argument of SetTotalBytesLimit.
sed -i 's/SetTotalBytesLimit(kProtoReadBytesLimit, 536870912)/SetTotalBytesLimit(kProtoReadBytesLimit)/' \
  "$SRC/src/caffe/util/io.cpp"

cmake -S "$SRC" -B "$CAFFE_BUILD/build" -DCMAKE_BUILD_TYPE=Release \
  -DCPU_ONLY=ON -DBLAS=Open -DUSE_OPENCV=OFF -DUSE_LMDB=OFF -DUSE_LEVELDB=OFF \
  -DUSE_HDF5=ON -DBUILD_python=OFF -DBUILD_python_layer=OFF -DBUILD_matlab=OFF -DBUILD_docs=OFF
cmake --build "$CAFFE_BUILD/build" --target caffe.bin -- -j"$JOBS"

echo "$CAFFE_BUILD/build/tools/caffe"
