#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where a net's time goes as threads are added: `cortado time` at each thread count in THREADS,
# alternating ROUNDS times (each layer's fastest round kept), and a markdown table per layer type
# and pass (depthwise convolutions apart): ms per iteration at each count, the speedup from the
# first count to the last and the share of the last count's time. The layers that gain least
# from a second thread are the ones to look at when the whole net scales worse than a peer.
#
#   bash bench/cpu/layer_scaling.sh
#   NET=bench/models/resnet50_train.prototxt:8 THREADS="1 2" ROUNDS=3 bash bench/cpu/layer_scaling.sh
#
# NET      prototxt[:batch] (default: MobileNet v1 at batch 8)
# THREADS  thread counts (default "1 2")         ROUNDS  alternated runs (default 2)
# ITERS    iterations per run (default 4)        CORTADO the binary (default build/cpp/tools/cortado)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CORTADO=${CORTADO:-$ROOT/build/cpp/tools/cortado}
NET=${NET:-bench/models/mobilenet_v1_train.prototxt:8}
THREADS=${THREADS:-1 2}
ROUNDS=${ROUNDS:-2}
ITERS=${ITERS:-4}

[[ -x $CORTADO ]] || { echo "missing binary: $CORTADO (build first)" >&2; exit 1; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
# shellcheck source=bench/nets.sh
source "$ROOT/bench/nets.sh"
model=$(net_model "$NET" "$TMP")

for round in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    "$CORTADO" time --model="$model" --iterations="$ITERS" --threads="$t" \
      >"$TMP/time-$t-$round.log" 2>&1 || { tail -5 "$TMP/time-$t-$round.log" >&2; exit 1; }
  done
done

# shellcheck disable=SC2086 # one argument per thread count
python3 - "$model" "$TMP" "$ROUNDS" $THREADS <<'EOF'
import collections, re, sys

model, tmp, rounds, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
types = {}
for block in re.split(r'\blayer\s*\{', open(model).read())[1:]:
    name = re.search(r'\bname:\s*"([^"]+)"', block)
    kind = re.search(r'\btype:\s*"([^"]+)"', block)
    if name and kind:
        types[name.group(1)] = kind.group(1)


def layers(path):
    """(layer, pass) -> ms, and the whole iteration's ms, of one `cortado time` log."""
    found, whole = {}, None
    for line in open(path):
        m = re.search(r'\]\s+(\S+)\s+(forward|backward): ([0-9.]+) ms', line)
        if m:
            found[(m.group(1), m.group(2))] = float(m.group(3))
        m = re.search(r'Average Forward-Backward: ([0-9.]+) ms', line)
        if m:
            whole = float(m.group(1))
    return found, whole


best, wholes = {}, {}
for t in threads:
    per_layer, whole = {}, []
    for r in range(1, rounds + 1):
        found, w = layers(f'{tmp}/time-{t}-{r}.log')
        whole.append(w)
        for key, ms in found.items():
            per_layer[key] = min(ms, per_layer.get(key, ms))
    best[t], wholes[t] = per_layer, min(whole)

groups = collections.defaultdict(lambda: collections.defaultdict(float))
for t in threads:
    for (name, direction), ms in best[t].items():
        kind = types.get(name, '?') + (' (depthwise)' if name.endswith('_dw') else '')
        groups[(kind, direction)][t] += ms

first, last = threads[0], threads[-1]
total = sum(g[last] for g in groups.values())
print(f'{model}: whole iteration ' + ', '.join(f'{wholes[t]:.1f} ms at {t}' for t in threads) +
      f' (speedup {wholes[first] / wholes[last]:.2f})\n')
print('| layer type, pass | ' + ' | '.join(f'ms, {t} threads' for t in threads) +
      f' | speedup {first} -> {last} | share at {last} |')
print('|---|' + '---|' * (len(threads) + 2))
for key, ms in sorted(groups.items(), key=lambda kv: -kv[1][last]):
    print(f'| {key[0]} {key[1]} | ' + ' | '.join(f'{ms[t]:.1f}' for t in threads) +
          f' | {ms[first] / ms[last]:.2f} | {100 * ms[last] / total:.0f}% |')
EOF
