# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Hosts made of Linux network namespaces, for tests that need processes on separate "hosts" of
# one machine: namespaces ${NS_PREFIX}1..N, each joined by a veth pair to one bridge in the root
# namespace, both directions of every link shaped with tbf, and the cleanup of all of it. The same
# layout as bench/comm/run.sh's part 2, with names of its own:
#   namespace ${NS_PREFIX}K        address $NS_NET.K/24 on veth ${NS_PREFIX}K-n, loopback up
#   veth      ${NS_PREFIX}K-h      its other end, in the root namespace, on the bridge
#   bridge    $NS_BRIDGE           $NS_NET.254/24 in the root namespace
# Sourced by a test; it sets these before calling anything (the defaults are hosts_apart.sh's):
#   NS_PREFIX=cthost NS_BRIDGE=ctbr0 NS_NET=10.214.0 NS_MTU=1500
#   NS_TBF_BURST=      tbf's bucket (default: 0.5 ms at the rate, at least 128 KiB)
#   NS_TBF_LATENCY=50ms  tbf's queue limit in time
# Needs root, iproute2's ip and tc (installed with apt-get when missing and root).

NS_PREFIX=${NS_PREFIX:-cthost}
NS_BRIDGE=${NS_BRIDGE:-ctbr0}
NS_NET=${NS_NET:-10.214.0}
NS_MTU=${NS_MTU:-1500}
NS_TBF_BURST=${NS_TBF_BURST:-}
NS_TBF_LATENCY=${NS_TBF_LATENCY:-50ms}

ns_name() { echo "$NS_PREFIX$1"; }          # host K -> its namespace
ns_addr() { echo "$NS_NET.$1"; }            # host K -> its address
ns_veth_root() { echo "$NS_PREFIX$1-h"; }   # host K -> its veth end on the bridge
ns_veth_host() { echo "$NS_PREFIX$1-n"; }   # host K -> its veth end in the namespace
ns_bridge_addr() { echo "$NS_NET.254"; }

# A tc rate ("1gbit", "500mbit", "10gbit", "100mbps") in bits per second; fails on anything else.
ns_rate_bps() {
  awk -v r="$1" 'BEGIN {
    r = tolower(r); n = r + 0; u = r; sub(/^[0-9.]+/, "", u)
    m["bit"] = 1; m[""] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
    m["bps"] = 8; m["kbps"] = 8e3; m["mbps"] = 8e6; m["gbps"] = 8e9
    if (!(u in m) || n <= 0) exit 1
    printf "%.0f\n", n * m[u]
  }'
}

ns_need_iproute2() {
  if command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1; then return 0; fi
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null 2>&1
  fi
  command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1
}

# Why namespaces with shaped links cannot be made here, or nothing.
ns_blocker() {
  if [[ $EUID -ne 0 ]]; then
    echo "needs root (network namespaces, veth, tc)"
    return
  fi
  if ! ns_need_iproute2; then
    echo "needs iproute2's ip and tc (apt-get install iproute2)"
    return
  fi
  local probe=${NS_PREFIX}probe
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "'ip netns add' fails here (no CAP_SYS_ADMIN / CAP_NET_ADMIN?)"
    return
  fi
  local why=""
  if ! ip link add "$probe-a" type veth peer name "$probe-b" 2>/dev/null; then
    why="cannot create a veth pair (no veth module?)"
  else
    command -v modprobe >/dev/null 2>&1 && modprobe -q sch_tbf 2>/dev/null
    tc qdisc add dev "$probe-a" root tbf rate 1gbit burst 128k latency 50ms 2>/dev/null ||
      why="tc cannot add a tbf qdisc (no sch_tbf?)"
    ip link del "$probe-a" 2>/dev/null
  fi
  ip netns del "$probe" 2>/dev/null
  [[ -z $why ]] || echo "$why"
}

# Our namespaces and links that exist now (leftovers of an earlier run included).
ns_list_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NS_PREFIX}([0-9]+|probe)\$" || true
}
ns_list_links() {
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
    grep -E "^(${NS_BRIDGE}|${NS_PREFIX}[0-9]+-h|${NS_PREFIX}probe-a)\$" || true
}

# Every process inside our namespaces (whatever started it: JVMs, their children).
ns_all_pids() {
  local ns
  for ns in $(ns_list_namespaces); do ip netns pids "$ns" 2>/dev/null; done
}

# Kills every process in our namespaces (TERM, then KILL after up to `grace` seconds), then
# removes the namespaces (their veth ends go with them), the veths and the bridge. Prints what it
# removed on stderr.
ns_remove_all() {  # [grace seconds, default 3]
  local grace=${1:-3} ns pid link removed="" waited=0
  local -a pids
  mapfile -t pids < <(ns_all_pids)
  if ((${#pids[@]})); then
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    while ((waited < grace * 10)) && [[ -n $(ns_all_pids) ]]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    for pid in $(ns_all_pids); do kill -KILL "$pid" 2>/dev/null; done
  fi
  for ns in $(ns_list_namespaces); do
    # A process killed just now may still hold the namespace for a moment.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null && removed+=" $ns"
  done
  for link in $(ns_list_links); do
    ip link del "$link" 2>/dev/null && removed+=" $link"
  done
  [[ -z $removed ]] || echo "# removed:$removed" >&2
}

# Builds hosts 1..n: the bridge, then per host its namespace, veth pair, address, loopback.
ns_setup() {  # hosts
  local n=$1 k ns
  ip link add "$NS_BRIDGE" type bridge stp_state 0 forward_delay 0 || return 1
  ip link set "$NS_BRIDGE" mtu "$NS_MTU" || return 1
  ip addr add "$(ns_bridge_addr)/24" dev "$NS_BRIDGE" || return 1
  ip link set "$NS_BRIDGE" up || return 1
  for ((k = 1; k <= n; k++)); do
    ns=$(ns_name "$k")
    ip netns add "$ns" || return 1
    ip link add "$(ns_veth_root "$k")" mtu "$NS_MTU" type veth \
      peer name "$(ns_veth_host "$k")" mtu "$NS_MTU" || return 1
    ip link set "$(ns_veth_host "$k")" netns "$ns" || return 1
    ip link set "$(ns_veth_root "$k")" master "$NS_BRIDGE" || return 1
    ip link set "$(ns_veth_root "$k")" up || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" addr add "$(ns_addr "$k")/24" dev "$(ns_veth_host "$k")" || return 1
    ip -n "$ns" link set "$(ns_veth_host "$k")" up || return 1
  done
}

# tbf on both ends of every host's link: egress of K-n (the host sending) and of K-h (the bridge
# sending to the host); "none" removes the shaping. burst: at least 128 KiB (two 64 KiB GSO
# packets: tbf splits a packet larger than its bucket) and 0.5 ms at the rate; latency 50 ms: the
# queue holds what TCP keeps in flight without a drop (bench/comm/run.sh measured these).
ns_shape() {  # rate hosts
  local rate=$1 n=$2 k burst bps
  if [[ $rate == none ]]; then
    for ((k = 1; k <= n; k++)); do
      tc qdisc del dev "$(ns_veth_root "$k")" root 2>/dev/null
      ip netns exec "$(ns_name "$k")" tc qdisc del dev "$(ns_veth_host "$k")" root 2>/dev/null
    done
    return 0
  fi
  bps=$(ns_rate_bps "$rate") || return 1
  burst=$NS_TBF_BURST
  if [[ -z $burst ]]; then
    burst=$(awk -v bps="$bps" 'BEGIN { b = bps / 8 * 0.0005; if (b < 131072) b = 131072; printf "%d\n", b }')
  fi
  for ((k = 1; k <= n; k++)); do
    tc qdisc replace dev "$(ns_veth_root "$k")" root tbf rate "$rate" burst "$burst" \
      latency "$NS_TBF_LATENCY" || return 1
    ip netns exec "$(ns_name "$k")" tc qdisc replace dev "$(ns_veth_host "$k")" root tbf \
      rate "$rate" burst "$burst" latency "$NS_TBF_LATENCY" || return 1
  done
  echo "tbf rate $rate burst $burst latency $NS_TBF_LATENCY"
}

# Whether host K reaches the bridge and host J (one ping each way, when ping exists; otherwise a
# TCP connect to a closed port, which is refused at once when the path works).
ns_check_path() {  # k j
  local k=$1 j=$2
  if command -v ping >/dev/null 2>&1; then
    ip netns exec "$(ns_name "$k")" ping -q -c 1 -W 2 "$(ns_bridge_addr)" >/dev/null 2>&1 &&
      ip netns exec "$(ns_name "$k")" ping -q -c 1 -W 2 "$(ns_addr "$j")" >/dev/null 2>&1
  else
    local out
    out=$(ip netns exec "$(ns_name "$k")" timeout 3 bash -c \
      ": </dev/tcp/$(ns_addr "$j")/9" 2>&1)
    [[ $out == *"refused"* ]]
  fi
}
