# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# Sourced by the CPU benchmarks (ROOT set to the repository): a net given as prototxt[:batch].

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
