#!/usr/bin/env bash
# Whole-net CPU training time, Cortado against BVLC Caffe, in the same run: for each net,
# `caffe time` and `cortado time` run alternately (ROUNDS times each, best run kept), each
# one process with the same thread count, and a markdown table of the average
# forward-backward time per iteration is printed, then the per-layer times of the Dropout,
# Eltwise (with the ReLU Cortado fuses into it) and depthwise convolution layers, then the time
# per layer type (forward + backward summed over the net's layers of that type).
#
#   bash bench/cpu/build_caffe.sh                     # once: builds /work/caffe-build/build/tools/caffe
#   ITERS=20 THREADS=2 bash bench/cpu/caffe_compare.sh
#   NETS="bench/models/lenet_train.prototxt" ITERS=5 bash bench/cpu/caffe_compare.sh
#
# NETS     space-separated prototxt[:batch] (default below)
# BATCH    batch size for every net (overrides :batch); applied to nets with Input layers only
# ITERS    timed iterations per run (default 10)      ROUNDS   alternated runs per tool (default 1)
# THREADS  CPU threads for both (default: nproc)      CAFFE, CORTADO  the two binaries
# Caffe's own layer loops are single-threaded; only its GEMMs (OpenBLAS) use THREADS.
# Nets that read data files (Data, ImageData, HDF5Data, WindowData layers) are skipped.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CAFFE=${CAFFE:-/work/caffe-build/build/tools/caffe}
CORTADO=${CORTADO:-$ROOT/build-ci/cpp/tools/cortado}
NETS=${NETS:-"bench/models/lenet_train.prototxt bench/models/cifar10_quick_train.prototxt bench/models/resnet50_train.prototxt:8 bench/models/mobilenet_v1_train.prototxt:8 bench/models/dropout_squeezenet.prototxt"}
ITERS=${ITERS:-10}
ROUNDS=${ROUNDS:-1}
THREADS=${THREADS:-$(nproc)}
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS GLOG_logtostderr=1

for b in "$CAFFE" "$CORTADO"; do [[ -x $b ]] || { echo "missing binary: $b" >&2; exit 1; }; done
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

# Forward-backward ms per iteration of a `time` log (empty if the run failed): average forward
# plus average backward pass, since Caffe's "Average Forward-Backward" counts whole milliseconds.
fb_ms() {
  awk '/Average Forward pass:/ { f = $(NF - 1) } /Average Backward pass:/ { b = $(NF - 1) }
       END { if (f != "" && b != "") printf "%.3f\n", f + b }' "$1"
}

# "name type" per layer; the type is "DepthwiseConvolution" when group == num_output > 1.
layer_types() {
  sed 's/#.*//' "$1" | tr '\n' ' ' | sed 's/layer *{/\n&/g' | awk '
    /^layer/ { n = t = g = o = "";
      if (match($0, /name: *"[^"]*"/)) { n = substr($0, RSTART, RLENGTH); sub(/name: *"/, "", n); sub(/"$/, "", n) }
      if (match($0, /type: *"[^"]*"/)) { t = substr($0, RSTART, RLENGTH); sub(/type: *"/, "", t); sub(/"$/, "", t) }
      if (match($0, /group: *[0-9]+/)) { g = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", g) }
      if (match($0, /num_output: *[0-9]+/)) { o = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", o) }
      if (t == "Convolution" && g != "" && g == o && g + 0 > 1) t = "DepthwiseConvolution";
      if (n != "") print n, t }'
}

# "fwd bwd" ms of one layer in a `time` log.
layer_ms() {
  awk -v l="$2" '$0 ~ "[ \t]" l "\tforward:" { for (i = 1; i <= NF; i++) if ($i == "forward:") f = $(i + 1) }
                 $0 ~ "[ \t]" l "\tbackward:" { for (i = 1; i <= NF; i++) if ($i == "backward:") b = $(i + 1) }
                 END { print (f == "" ? "-" : f), (b == "" ? "-" : b) }' "$1"
}

rows=() layers=() types=() notes=()
for spec in $NETS; do
  net=${spec%%:*}; batch=${BATCH:-}; [[ $spec == *:* && -z $batch ]] && batch=${spec#*:}
  [[ $net = /* ]] || net=$ROOT/$net
  name=$(basename "$net" .prototxt)
  if grep -Eq 'type: *"(Data|ImageData|HDF5Data|WindowData)"' "$net"; then
    notes+=("$name: skipped, reads data files (use a copy with Input layers)"); continue
  fi
  model=$TMP/$name.prototxt
  if [[ -n $batch ]] && grep -q 'type: *"Input"' "$net"; then
    sed -E "s/shape *\{ *dim: *[0-9]+/shape { dim: $batch/g" "$net" >"$model"   # first dim of each Input shape
  else
    cp "$net" "$model"
  fi
  batch=$(grep -oE 'shape *\{ *dim: *[0-9]+' "$model" | head -1 | grep -oE '[0-9]+$' || echo "?")

  best_c="" best_o=""
  for r in $(seq "$ROUNDS"); do
    ("$CAFFE" time -model "$model" -iterations "$ITERS" || true) >"$TMP/c$r.log" 2>&1
    ("$CORTADO" time --model="$model" --iterations="$ITERS" --threads="$THREADS" || true) >"$TMP/o$r.log" 2>&1
    c=$(fb_ms "$TMP/c$r.log"); o=$(fb_ms "$TMP/o$r.log")
    if [[ -n $c ]] && { [[ -z $best_c ]] || awk "BEGIN{exit !($c < $best_c)}"; }; then best_c=$c; cp "$TMP/c$r.log" "$TMP/c.log"; fi
    if [[ -n $o ]] && { [[ -z $best_o ]] || awk "BEGIN{exit !($o < $best_o)}"; }; then best_o=$o; cp "$TMP/o$r.log" "$TMP/o.log"; fi
  done
  if [[ -z $best_c ]]; then
    why=$(grep -m1 -oE 'Unknown layer type: [A-Za-z0-9_]+|Check failed.*|Error.*' "$TMP/c1.log" || tail -1 "$TMP/c1.log")
    notes+=("$name: Caffe failed: $(sed 's/ (known.*//' <<<"$why" | cut -c1-200)")
  fi
  [[ -z $best_o ]] && notes+=("$name: Cortado failed: $(tail -1 "$TMP/o1.log" | sed 's/ (known.*//' | cut -c1-200)")
  ratio=-; [[ -n $best_c && -n $best_o ]] && awk "BEGIN{exit !($best_c > 0)}" && ratio=$(awk "BEGIN{printf \"%.2f\", $best_o / $best_c}")
  rows+=("| $name | $batch | ${best_c:--} | ${best_o:--} | $ratio |")

  while read -r lname ltype; do
    case $ltype in Dropout|Eltwise|DepthwiseConvolution) ;; *) continue ;; esac
    read -r cf cb < <( [[ -n $best_c ]] && layer_ms "$TMP/c.log" "$lname" || echo "- -")
    read -r of ob < <( [[ -n $best_o ]] && layer_ms "$TMP/o.log" "$lname" || echo "- -")
    # Cortado fuses the ReLU that follows a residual sum into the Eltwise layer; Caffe times it
    # apart, so its row adds that ReLU ("<name>_relu") to compare like with like.
    if [[ $ltype == Eltwise && -n $best_c && -n $best_o ]]; then
      read -r crf crb < <(layer_ms "$TMP/c.log" "${lname}_relu")
      read -r orf _ < <(layer_ms "$TMP/o.log" "${lname}_relu")
      if [[ $crf != - && $orf == - ]]; then
        ltype="Eltwise+ReLU"
        cf=$(awk "BEGIN{print $cf + $crf}"); cb=$(awk "BEGIN{print $cb + $crb}")
      fi
    fi
    layers+=("| $name | $lname | $ltype | $cf | $cb | $of | $ob |")
  done < <(layer_types "$model")
  # Per layer type, forward + backward: a layer Cortado fused away (BatchNorm, Scale, ReLU) counts
  # with the layer it was fused into, on both sides.
  if [[ -n $best_c && -n $best_o ]]; then
    while read -r line; do types+=("$line"); done < <(python3 - "$model" "$TMP/c.log" "$TMP/o.log" "$name" <<'PY'
import collections, re, sys
model, caffe_log, cortado_log, net = sys.argv[1:]
kinds = dict(re.findall(r'name:\s*"([^"]+)"\s*type:\s*"(\w+)"', open(model).read()))
def times(path):
    t = collections.OrderedDict()
    for line in open(path):
        m = re.search(r"\]\s+(\S+)\s+(forward|backward): ([0-9.]+) ms", line)
        if m: t[m.group(1)] = t.get(m.group(1), 0.0) + float(m.group(3))
    return t
caffe, cortado = times(caffe_log), times(cortado_log)
kind = lambda n: "Split" if n.endswith("_split") else kinds.get(n, "?")
host, group, fused = None, {}, collections.defaultdict(set)
for n in caffe:
    if n in cortado or host is None: host = n
    else: fused[kind(host)].add(kind(n))
    group[n] = host
c, o = collections.Counter(), collections.Counter()
for n, t in caffe.items(): c[kind(group[n])] += t
for n, t in cortado.items(): o[kind(n)] += t
for k in sorted(c, key=lambda k: -c[k]):
    if c[k] < 0.01: continue  # layers that take no time (Input)
    label = k + "".join("+" + f for f in sorted(fused[k]))
    ratio = f"{o[k] / c[k]:.2f}" if c[k] > 0 else "-"
    print(f"| {net} | {label} | {c[k]:.2f} | {o[k]:.2f} | {ratio} |")
PY
)
  fi
  rm -f "$TMP"/[co]*.log
done

echo "Threads: $THREADS, iterations: $ITERS, rounds: $ROUNDS (best kept), $(date -u +%F)"
echo
if ((${#rows[@]})); then
  echo "| net | batch | Caffe ms/iter | Cortado ms/iter | Cortado/Caffe |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
fi
if ((${#layers[@]})); then
  echo
  echo "| net | layer | type | Caffe fwd ms | Caffe bwd ms | Cortado fwd ms | Cortado bwd ms |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${layers[@]}"
fi
if ((${#types[@]})); then
  echo
  echo "| net | layer type (+ what Cortado fuses into it) | Caffe ms | Cortado ms | Cortado/Caffe |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' "${types[@]}"
fi
if ((${#notes[@]})); then echo; printf -- '- %s\n' "${notes[@]}"; fi
