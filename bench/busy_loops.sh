# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by the contention benchmarks (bench/cpu/contention.sh, bench/spark/contention.sh):
# busy loops that share the cores with a run. start_loops N starts N; stop_loops ends them all.
# A script that sources it stops them on exit (trap 'stop_loops; ...' EXIT).
loops=()

start_loops() {
  local i
  for ((i = 0; i < $1; ++i)); do
    bash -c 'while :; do :; done' &
    loops+=("$!")
  done
}

stop_loops() {
  if ((${#loops[@]})); then
    kill "${loops[@]}" 2>/dev/null || true
    wait "${loops[@]}" 2>/dev/null || true  # their status is SIGTERM's
  fi
  loops=()
}
