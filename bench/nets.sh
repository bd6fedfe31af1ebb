# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# Sourced by the benchmarks that train or time whole nets (ROOT set to the repository): a net
# given as prototxt[:batch], and the time per iteration a training log's last display gives.

# net_model SPEC DIR: writes DIR/<name>.prototxt, the net of SPEC (relative to ROOT unless
# absolute) with the first dimension of each Input shape set to SPEC's batch when it has one,
# and prints that path.
net_model() {
  local spec=$1 dir=$2 net batch="" model
  net=${spec%%:*}
  [[ $spec == *:* ]] && batch=${spec#*:}
  [[ $net = /* ]] || net=$ROOT/$net
  model=$dir/$(basename "$net" .prototxt).prototxt
  if [[ -n $batch ]]; then
    sed -E "s/shape *\{ *dim: *[0-9]+/shape { dim: $batch/g" "$net" >"$model"
  else
    cp "$net" "$model"
  fi
  echo "$model"
}

# iteration_seconds LOG: seconds per iteration over the iterations the last display of a
# `cortado train` log timed ("... iter/s, 1.23s/5 iters)"); prints nothing when it has none.
iteration_seconds() {
  sed -n 's/.*iter\/s, \([0-9.e+-]*\)s\/\([0-9]*\) iters).*/\1 \2/p' "$1" | tail -1 |
    awk '{ printf "%.6f", $1 / $2 }'
}
