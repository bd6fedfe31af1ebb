#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CORTADO_NVIDIA_WHEELS: a configure run pointed at a site-packages/nvidia folder laid out as
# NVIDIA's wheels are (cu13/ with cuBLAS and cuRAND, cudnn/, nccl/; each include/ and lib/, and
# only versioned library names) finds all four libraries there; a folder that does not exist
# stops the configure with an error naming it. The libraries are empty stand-ins: only
# configure runs.
#   bash tests/install/nvidia_wheels.sh SOURCE_DIR
set -euo pipefail
src=$(cd "${1:?usage: nvidia_wheels.sh SOURCE_DIR}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheels=$work/site-packages/nvidia
make_lib() {  # folder header library
  mkdir -p "$wheels/$1/include" "$wheels/$1/lib"
  : >"$wheels/$1/include/$2"
  : >"$wheels/$1/lib/$3"
}
make_lib cu13 cublas_v2.h libcublas.so.13
make_lib cu13 curand.h libcurand.so.10
make_lib cudnn cudnn.h libcudnn.so.9
make_lib nccl nccl.h libnccl.so.2

cmake -S "$src" -B "$work/build" -DWITH_CUDA=OFF -DCORTADO_NVIDIA_WHEELS="$wheels" >"$work/log" 2>&1 ||
  { cat "$work/log"; echo "FAIL: configure with CORTADO_NVIDIA_WHEELS failed"; exit 1; }
status=0
for expected in "CUBLAS_LIBRARY:FILEPATH=$wheels/cu13/lib/libcublas.so.13" \
                "CURAND_LIBRARY:FILEPATH=$wheels/cu13/lib/libcurand.so.10" \
                "CUDNN_LIBRARY:FILEPATH=$wheels/cudnn/lib/libcudnn.so.9" \
                "CUDNN_INCLUDE_DIR:PATH=$wheels/cudnn/include" \
                "NCCL_LIBRARY:FILEPATH=$wheels/nccl/lib/libnccl.so.2"; do
  if grep -qxF "$expected" "$work/build/CMakeCache.txt"; then
    echo "ok: $expected"
  else
    echo "FAIL: not in CMakeCache.txt: $expected"
    grep -E "^(CUBLAS|CURAND|CUDNN|NCCL)_" "$work/build/CMakeCache.txt" || true
    status=1
  fi
done

if cmake -S "$src" -B "$work/missing" -DCORTADO_NVIDIA_WHEELS="$work/absent" >"$work/log2" 2>&1; then
  echo "FAIL: a missing CORTADO_NVIDIA_WHEELS folder was accepted"
  status=1
elif grep -q "CORTADO_NVIDIA_WHEELS: '$work/absent' is not a folder" "$work/log2"; then
  echo "ok: a missing folder is refused by name"
else
  cat "$work/log2"
  echo "FAIL: the error does not name the missing folder"
  status=1
fi
exit $status
