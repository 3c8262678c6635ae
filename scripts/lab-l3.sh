#!/usr/bin/env bash
# Bloomplane routed lab: two hosts and three routers in a triangle, each in its
# own network namespace, every router running `dataplane run` with its own
# config.
#
#   scripts/lab-l3.sh up                       # (re)create namespaces and links
#   scripts/lab-l3.sh configs DIR [loop] [icarus] [static] [peers] [flows] [loss] [ring|xdp] [digest]
#                                              # write DIR/r1.toml r2.toml r3.toml
#   scripts/lab-l3.sh start DIR [BIN]          # start the three routers
#   scripts/lab-l3.sh stop DIR                 # SIGTERM them, wait, final stats
#   scripts/lab-l3.sh down                     # remove everything `up` made
#   scripts/lab-l3.sh status
#
#   host A (<P>-ha)                                              host B (<P>-hb)
#   eth0 10.81.1.2 --- r1-a [R1] r1-r2 ----- r2-r1 [R2] r2-b --- eth0 10.81.2.2
#                        r1-r3 \  10.81.12/24   / r2-r3
#                     10.81.13/24 \           / 10.81.23/24
#                                 r3-r1 [R3] r3-r2
#                                        r3-c
#                                         |
#                                eth0 10.81.3.2 host C (<P>-hc)
#
# Addresses: the link between Rx and Ry is 10.81.xy.0/24 and 2001:db8:81:xy::/64,
# router x is .x / ::x on it; host A's link is 10.81.1.0/24 (R1 .1, A .2),
# host B's 10.81.2.0/24 (R2 .1, B .2), host C's 10.81.3.0/24 (R3 .1, C .2),
# the same in IPv6 (2001:db8:81:1::/64, ...). Hosts route everything through
# their router.
#
# The routers' ports have no kernel addresses and IPv6 is off on them: the
# dataplane owns them (it answers ARP/ND and pings for its addresses, routes,
# decrements TTL, sends ICMP errors). A to B normally crosses R1 and R2.
#
# `configs ... loop` adds a routing loop for 10.99.0.0/16 (and
# 2001:db8:99::/48): R1 sends it to R2, R2 to R3, R3 back to R1. `icarus` turns
# on Icarus loop detection: node ids 1, 2, 3, filters inserted on the
# host-facing ports (r1-a, r2-b) and stripped there. `static` writes every
# router's neighbours into its config and gives the hosts static neighbour
# entries for their gateway (no ARP/ND needed). `peers` turns on multicast
# and the protocol between routers (docs/network.md): each router peers with
# the two others over the triangle's links, messages tagged with the key
# "lab-l3"; `flows` adds the network-wide flow set (exchanges every 500 ms)
# and heavy-flow detection on R1 alone (1% of 500 ms epochs); `loss` drops
# 30% of the protocol's messages on purpose (`test_loss`). `ring` or `xdp`
# runs the routers on that port backend (`[io] backend`; pnet without).
# `digest` turns on packet digests for traceback: each router serves
# /metrics and /digest on 127.0.0.1:9464 of its own namespace, answering
# queries from 127.0.0.1, and DIR/topology.toml describes the lab for
# `traffic-gen traceback` (run as root: it connects from inside each
# router's namespace).
#
# Environment: LAB_PREFIX (default "bl") names the namespaces <P>-ha, <P>-hb,
# <P>-r1, <P>-r2, <P>-r3, so parallel labs do not collide. Needs root,
# iproute2, ethtool (offloads off when present).
set -euo pipefail

P=${LAB_PREFIX:-bl}
ROUTERS=(r1 r2 r3)
HOSTS=(ha hb hc)
die() { echo "lab-l3.sh: $*" >&2; exit 1; }
# nsx, nsysctl
# shellcheck source=scripts/lab-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lab-lib.sh"

# Every veth end: "namespace-suffix device mac ipv4 ipv6" (router ends carry
# the router's addresses, given to the dataplane, not to the kernel).
LINKS=(
  "ha eth0  02:81:00:01:00:02 10.81.1.2  2001:db8:81:1::2|r1 r1-a  02:81:00:01:00:01 10.81.1.1  2001:db8:81:1::1"
  "hb eth0  02:81:00:02:00:02 10.81.2.2  2001:db8:81:2::2|r2 r2-b  02:81:00:02:00:01 10.81.2.1  2001:db8:81:2::1"
  "hc eth0  02:81:00:03:00:02 10.81.3.2  2001:db8:81:3::2|r3 r3-c  02:81:00:03:00:01 10.81.3.1  2001:db8:81:3::1"
  "r1 r1-r2 02:81:00:12:00:01 10.81.12.1 2001:db8:81:12::1|r2 r2-r1 02:81:00:12:00:02 10.81.12.2 2001:db8:81:12::2"
  "r2 r2-r3 02:81:00:23:00:02 10.81.23.2 2001:db8:81:23::2|r3 r3-r2 02:81:00:23:00:03 10.81.23.3 2001:db8:81:23::3"
  "r1 r1-r3 02:81:00:13:00:01 10.81.13.1 2001:db8:81:13::1|r3 r3-r1 02:81:00:13:00:03 10.81.13.3 2001:db8:81:13::3"
)

exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

down() {
  local n
  for n in "${HOSTS[@]}" "${ROUTERS[@]}"; do
    if exists "$P-$n"; then ip netns del "$P-$n"; fi
  done
}

offloads_off() {
  command -v ethtool >/dev/null || return 0
  local f
  for f in rx tx sg tso gso gro; do
    nsx "$1" ethtool -K "$2" "$f" off >/dev/null 2>&1 || true
  done
}

up() {
  ((EUID == 0)) || die "must run as root"
  ip netns list >/dev/null 2>&1 || die "ip netns unavailable"
  down
  local n
  for n in "${HOSTS[@]}" "${ROUTERS[@]}"; do
    ip netns add "$P-$n"
    nsx "$P-$n" ip link set lo up
    nsysctl "$P-$n" net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
  done
  for n in "${ROUTERS[@]}"; do
    # The kernel neither routes nor speaks on a router's ports.
    nsysctl "$P-$n" net.ipv4.ip_forward=0 net.ipv6.conf.default.disable_ipv6=1
  done
  local l x y
  for l in "${LINKS[@]}"; do
    read -r xn xd xm x4 x6 <<<"${l%%|*}"
    read -r yn yd ym y4 y6 <<<"${l##*|}"
    ip link add "$xd" netns "$P-$xn" address "$xm" type veth peer name "$yd" netns "$P-$yn" address "$ym"
    for x in "$xn $xd $x4 $x6" "$yn $yd $y4 $y6"; do
      read -r n d a4 a6 <<<"$x"
      offloads_off "$P-$n" "$d"
      if [[ $n == h* ]]; then
        nsx "$P-$n" ip addr add "$a4/24" dev "$d"
        nsx "$P-$n" ip -6 addr add "$a6/64" dev "$d" nodad
      else
        nsysctl "$P-$n" "net.ipv6.conf.$d.disable_ipv6=1"
      fi
      nsx "$P-$n" ip link set "$d" up
    done
  done
  nsx "$P-ha" ip route add default via 10.81.1.1
  nsx "$P-ha" ip -6 route add default via 2001:db8:81:1::1
  nsx "$P-hb" ip route add default via 10.81.2.1
  nsx "$P-hb" ip -6 route add default via 2001:db8:81:2::1
  nsx "$P-hc" ip route add default via 10.81.3.1
  nsx "$P-hc" ip -6 route add default via 2001:db8:81:3::1
  echo "lab-l3.sh: up: $P-ha 10.81.1.2 -- [$P-r1] -- [$P-r2] -- $P-hb 10.81.2.2, [$P-r3] beside both with $P-hc 10.81.3.2"
}

# The far end of every link of router $1: "local-device far-ipv4 far-ipv6 far-mac".
neighbours_of() {
  local l
  for l in "${LINKS[@]}"; do
    read -r xn xd xm x4 x6 <<<"${l%%|*}"
    read -r yn yd ym y4 y6 <<<"${l##*|}"
    [[ $xn == "$1" ]] && echo "$xd $y4 $y6 $ym"
    [[ $yn == "$1" ]] && echo "$yd $x4 $x6 $xm"
  done
  return 0
}

# Writes router $1's config to $2 (flags: loop, icarus, static, peers, flows,
# loss; then the backend; then digest).
config() {
  local r=$1 out=$2 loop=$3 icarus=$4 static=$5 peers=$6 flows=$7 loss=$8 backend=$9 digest=${10} l
  {
    echo "# Router $r of scripts/lab-l3.sh (written by \`lab-l3.sh configs\`)."
    echo "[workers]"
    echo "count = 1"
    for l in "${LINKS[@]}"; do
      for x in "${l%%|*}" "${l##*|}"; do
        read -r n d m a4 a6 <<<"$x"
        [[ $n == "$r" ]] || continue
        echo
        echo "[[interfaces]]"
        echo "name = \"$d\""
        echo "addresses = [\"$a4/24\", \"$a6/64\"]"
        echo "mac = \"$m\""
      done
    done
    # Static routes: everything not connected goes the short way round.
    routes=()
    case $r in
      r1) routes=("10.81.2.0/24 10.81.12.2" "10.81.23.0/24 10.81.12.2" "10.81.3.0/24 10.81.13.3"
                  "2001:db8:81:2::/64 2001:db8:81:12::2" "2001:db8:81:23::/64 2001:db8:81:12::2"
                  "2001:db8:81:3::/64 2001:db8:81:13::3") ;;
      r2) routes=("10.81.1.0/24 10.81.12.1" "10.81.13.0/24 10.81.12.1" "10.81.3.0/24 10.81.23.3"
                  "2001:db8:81:1::/64 2001:db8:81:12::1" "2001:db8:81:13::/64 2001:db8:81:12::1"
                  "2001:db8:81:3::/64 2001:db8:81:23::3") ;;
      r3) routes=("10.81.1.0/24 10.81.13.1" "10.81.2.0/24 10.81.23.2" "10.81.12.0/24 10.81.13.1"
                  "2001:db8:81:1::/64 2001:db8:81:13::1" "2001:db8:81:2::/64 2001:db8:81:23::2"
                  "2001:db8:81:12::/64 2001:db8:81:13::1") ;;
    esac
    if [[ $loop == 1 ]]; then
      case $r in
        r1) routes+=("10.99.0.0/16 10.81.12.2" "2001:db8:99::/48 2001:db8:81:12::2") ;;
        r2) routes+=("10.99.0.0/16 10.81.23.3" "2001:db8:99::/48 2001:db8:81:23::3") ;;
        r3) routes+=("10.99.0.0/16 10.81.13.1" "2001:db8:99::/48 2001:db8:81:13::1") ;;
      esac
    fi
    for x in "${routes[@]}"; do
      read -r prefix via <<<"$x"
      echo
      echo "[[routes]]"
      echo "prefix = \"$prefix\""
      echo "via = \"$via\""
    done
    if [[ $static == 1 ]]; then
      while read -r d a4 a6 m; do
        for a in "$a4" "$a6"; do
          echo
          echo "[[neighbours]]"
          echo "address = \"$a\""
          echo "mac = \"$m\""
        done
      done < <(neighbours_of "$r")
    fi
    if [[ $peers == 1 ]]; then
      echo
      echo "[multicast]"
      echo
      echo "[peering]"
      echo "router_id = ${r#r}"
      [[ $loss == 1 ]] && echo "test_loss = 0.3"
      if [[ $flows == 1 ]]; then
        echo
        echo "[peering.flows]"
        echo "exchange_interval_ms = 500"
      fi
      while read -r d a4 a6 m; do
        [[ $d == r*-r* ]] || continue
        echo
        echo "[[peers]]"
        echo "interface = \"$d\""
        echo "address = \"$a4\""
        echo "key = \"lab-l3\""
      done < <(neighbours_of "$r")
    fi
    if [[ $flows == 1 && $r == r1 ]]; then
      echo
      echo "[heavy]"
      echo "threshold = { share = 0.01 }"
      echo "epoch_ms = 500"
      echo "report = \"/dev/null\""
    fi
    if [[ $icarus == 1 ]]; then
      local edge=""
      case $r in r1) edge='"r1-a"' ;; r2) edge='"r2-b"' ;; r3) edge='"r3-c"' ;; esac
      echo
      echo "[icarus]"
      echo "node_id = ${r#r}"
      echo "insert_on = [$edge]"
      echo "strip_on = [$edge]"
    fi
    if [[ $backend != pnet ]]; then
      echo
      echo "[io]"
      echo "backend = \"$backend\""
    fi
    if [[ $digest == 1 ]]; then
      echo
      echo "[telemetry]"
      echo "listen = \"127.0.0.1:9464\""
      echo
      echo "[digest]"
      echo "window_ms = 1000"
      echo "windows = 60"
      echo "packet_rate = 10000"
      echo "false_positive_rate = 0.000001"
      echo "query_clients = [\"127.0.0.1\"]"
      echo "query_rate = 20"
      echo "query_burst = 20"
    fi
  } >"$out"
}

# Writes the lab's topology for `traffic-gen traceback` to $1.
topology() {
  local out=$1 r l
  {
    echo "# The lab of scripts/lab-l3.sh (LAB_PREFIX=$P), for traffic-gen traceback."
    for r in "${ROUTERS[@]}"; do
      echo
      echo "[[routers]]"
      echo "name = \"$r\""
      echo "query = \"127.0.0.1:9464\""
      echo "netns = \"$P-$r\""
    done
    for l in "${LINKS[@]}"; do
      read -r xn xd _ <<<"${l%%|*}"
      read -r yn yd _ <<<"${l##*|}"
      echo
      if [[ $xn == h* ]]; then
        local host=${xn#h}
        echo "[[hosts]]"
        echo "name = \"${host^^}\""
        echo "at = \"$yn:$yd\""
      else
        echo "[[links]]"
        echo "ends = [\"$xn:$xd\", \"$yn:$yd\"]"
      fi
    done
  } >"$out"
}

configs() {
  local dir=${1:?usage: configs DIR [loop] [icarus] [static] [peers] [flows] [loss] [ring|xdp] [digest]}
  shift
  local loop=0 icarus=0 static=0 peers=0 flows=0 loss=0 backend=pnet digest=0 f
  for f in "$@"; do
    case $f in
      loop) loop=1 ;; icarus) icarus=1 ;; static) static=1 ;;
      peers) peers=1 ;; flows) peers=1 flows=1 ;; loss) loss=1 ;;
      ring | xdp) backend=$f ;; digest) digest=1 ;;
      *) die "configs: unknown flag \"$f\" (loop, icarus, static, peers, flows, loss, ring, xdp, digest)" ;;
    esac
  done
  mkdir -p "$dir"
  local r
  for r in "${ROUTERS[@]}"; do
    config "$r" "$dir/$r.toml" "$loop" "$icarus" "$static" "$peers" "$flows" "$loss" "$backend" "$digest"
  done
  if [[ $digest == 1 ]]; then topology "$dir/topology.toml"; fi
  if [[ $static == 1 ]] && exists "$P-ha"; then
    nsx "$P-ha" ip neigh replace 10.81.1.1 lladdr 02:81:00:01:00:01 dev eth0 nud permanent
    nsx "$P-ha" ip -6 neigh replace 2001:db8:81:1::1 lladdr 02:81:00:01:00:01 dev eth0 nud permanent
    nsx "$P-hb" ip neigh replace 10.81.2.1 lladdr 02:81:00:02:00:01 dev eth0 nud permanent
    nsx "$P-hb" ip -6 neigh replace 2001:db8:81:2::1 lladdr 02:81:00:02:00:01 dev eth0 nud permanent
    nsx "$P-hc" ip neigh replace 10.81.3.1 lladdr 02:81:00:03:00:01 dev eth0 nud permanent
    nsx "$P-hc" ip -6 neigh replace 2001:db8:81:3::1 lladdr 02:81:00:03:00:01 dev eth0 nud permanent
  fi
  echo "lab-l3.sh: wrote $dir/r1.toml $dir/r2.toml $dir/r3.toml${digest/#1/ $dir/topology.toml}"
}

start() {
  local dir=${1:?usage: start DIR [BIN]} bin=${2:-target/release/dataplane} r
  [[ -x $bin ]] || die "no dataplane binary at $bin (cargo build --release -p dataplane)"
  for r in "${ROUTERS[@]}"; do
    [[ -f $dir/$r.toml ]] || die "$dir/$r.toml missing (run: $0 configs $dir)"
    # `ip netns exec` execs the router: $! is the router's pid.
    ip netns exec "$P-$r" "$bin" run --config "$dir/$r.toml" --final-report "$dir/$r.json" 2>"$dir/$r.err" &
    echo $! >"$dir/$r.pid"
  done
  for r in "${ROUTERS[@]}"; do
    for _ in $(seq 100); do grep -q running "$dir/$r.err" 2>/dev/null && break; sleep 0.1; done
    grep -q running "$dir/$r.err" || die "$r did not start: $(cat "$dir/$r.err")"
  done
  echo "lab-l3.sh: started r1 r2 r3 (stderr in $dir/r*.err)"
}

stop() {
  local dir=${1:?usage: stop DIR} r pid
  for r in "${ROUTERS[@]}"; do
    [[ -f $dir/$r.pid ]] || continue
    pid=$(cat "$dir/$r.pid")
    kill -TERM "$pid" 2>/dev/null || true
  done
  for r in "${ROUTERS[@]}"; do
    [[ -f $dir/$r.pid ]] || continue
    pid=$(cat "$dir/$r.pid")
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && die "$r (pid $pid) did not stop within 10 s of SIGTERM"
    rm -f "$dir/$r.pid"
  done
  echo "lab-l3.sh: stopped (final reports in $dir/r*.json)"
}

status() {
  local n
  for n in "${HOSTS[@]}" "${ROUTERS[@]}"; do
    if exists "$P-$n"; then
      echo "== $P-$n"
      nsx "$P-$n" ip -br link
    else
      echo "== $P-$n (absent)"
    fi
  done
}

case ${1:-} in
  up) up ;;
  down) ((EUID == 0)) || die "must run as root"; down; echo "lab-l3.sh: down" ;;
  configs) shift; configs "$@" ;;
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  status) status ;;
  *) echo "usage: $0 up|configs DIR [loop] [icarus] [static] [peers] [flows] [loss] [ring|xdp] [digest]|start DIR [BIN]|stop DIR|down|status" >&2; exit 2 ;;
esac
