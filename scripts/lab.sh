#!/usr/bin/env bash
# Bloomplane lab: three hosts and a router, each in its own network namespace.
#
#   scripts/lab.sh up      # (re)create the lab; idempotent
#   scripts/lab.sh down    # remove everything `up` made; idempotent
#   scripts/lab.sh status  # list the namespaces and their links
#
#        host A (<P>-a)             router (<P>-r)              host B (<P>-b)
#   eth0 10.77.0.1/24 ---- r-a  [dataplane]  r-b ---- eth0 10.77.0.2/24
#                                    r-c
#                                     |
#                              eth0 10.77.0.3/24  host C (<P>-c)
#
# The router's ports (r-a, r-b, r-c) have no addresses: the dataplane reads and
# writes them with packet sockets (see dataplane/examples/router.toml). The
# hosts share one subnet and know each other's MAC statically (no ARP needed);
# A routes multicast (224.0.0.0/4) out of eth0. IPv6 DAD is off everywhere and
# IPv6 is off on the router's ports (no router-originated noise). Checksum and
# segmentation offloads are off on every veth (ethtool -K), so frames carry
# real checksums and are never larger than the MTU.
#
# Environment: LAB_PREFIX (default "bp") names the namespaces <P>-a, <P>-r,
# <P>-b, <P>-c, so parallel labs do not collide. LAB_MTU (default: the
# kernel's 1500) sets every veth's MTU, e.g. 9000 for 1518-byte frames
# (1504 bytes of IP), which also leaves room for an Icarus option the
# router inserts. LAB_QUEUES (default 1) gives every veth end that many
# receive and transmit queues (ethtool -L), for the AF_XDP backend with
# several workers. Needs root, iproute2, ethtool
# (installed with apt-get when missing and possible).
set -euo pipefail

P=${LAB_PREFIX:-bp}
MTU=${LAB_MTU:-}
[[ -z $MTU || $MTU =~ ^[0-9]+$ ]] || { echo "lab.sh: LAB_MTU must be a number, got \"$MTU\"" >&2; exit 1; }
QUEUES=${LAB_QUEUES:-1}
[[ $QUEUES =~ ^[1-9][0-9]*$ ]] || { echo "lab.sh: LAB_QUEUES must be a positive number, got \"$QUEUES\"" >&2; exit 1; }
NS_A=$P-a NS_R=$P-r NS_B=$P-b NS_C=$P-c
ALL_NS=("$NS_A" "$NS_R" "$NS_B" "$NS_C")
SUBNET=10.77.0
declare -A ADDR=([a]=$SUBNET.1 [b]=$SUBNET.2 [c]=$SUBNET.3)
declare -A MAC=([a]=02:bb:00:00:00:0a [b]=02:bb:00:00:00:0b [c]=02:bb:00:00:00:0c)

die() { echo "lab.sh: $*" >&2; exit 1; }
# nsx, nsysctl
# shellcheck source=scripts/lab-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lab-lib.sh"

need_tools() {
  ((EUID == 0)) || die "must run as root"
  command -v ip >/dev/null || die "ip (iproute2) not found"
  ip netns list >/dev/null 2>&1 || die "ip netns unavailable"
  if ! command -v ethtool >/dev/null; then
    if command -v apt-get >/dev/null; then
      echo "lab.sh: installing ethtool" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ethtool </dev/null >/dev/null 2>&1 ||
        { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ethtool </dev/null >/dev/null 2>&1; } ||
        echo "lab.sh: warning: could not install ethtool; offloads stay on" >&2
    else
      echo "lab.sh: warning: ethtool missing; offloads stay on" >&2
    fi
  fi
}

offloads_off() {
  local ns=$1 dev=$2
  command -v ethtool >/dev/null || return 0
  # Each feature separately: a veth may not offer all of them.
  local f
  for f in rx tx sg tso gso gro; do
    nsx "$ns" ethtool -K "$dev" "$f" off >/dev/null 2>&1 || true
  done
}

down() {
  local ns
  for ns in "${ALL_NS[@]}"; do
    if ip netns list | awk '{print $1}' | grep -qx "$ns"; then
      ip netns del "$ns"
    fi
  done
}

host_sysctls() {
  local ns=$1
  nsysctl "$ns" net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
  nsysctl "$ns" net.ipv6.conf.all.dad_transmits=0 net.ipv6.conf.default.dad_transmits=0
}

up() {
  need_tools
  down
  local ns
  for ns in "${ALL_NS[@]}"; do
    ip netns add "$ns"
    nsx "$ns" ip link set lo up
    host_sysctls "$ns"
  done
  # The router never routes with its kernel, and sends nothing of its own.
  nsysctl "$NS_R" net.ipv4.ip_forward=0 net.ipv6.conf.default.disable_ipv6=1

  local h peer_ns
  for h in a b c; do
    peer_ns=$P-$h
    ip link add eth0 netns "$peer_ns" address "${MAC[$h]}" type veth peer name "r-$h" netns "$NS_R"
    nsysctl "$NS_R" "net.ipv6.conf.r-$h.disable_ipv6=1"
    nsysctl "$peer_ns" net.ipv6.conf.eth0.accept_dad=0
    nsx "$peer_ns" ip addr add "${ADDR[$h]}/24" dev eth0
    offloads_off "$peer_ns" eth0
    offloads_off "$NS_R" "r-$h"
    if [[ -n $MTU ]]; then
      nsx "$peer_ns" ip link set eth0 mtu "$MTU"
      nsx "$NS_R" ip link set "r-$h" mtu "$MTU"
    fi
    if ((QUEUES > 1)); then
      queues "$peer_ns" eth0 "$QUEUES"
      queues "$NS_R" "r-$h" "$QUEUES"
    fi
    nsx "$NS_R" ip link set "r-$h" up
    nsx "$peer_ns" ip link set eth0 up
  done
  # Static neighbours: A <-> B, A <-> C, B <-> C.
  local x y
  for x in a b c; do
    for y in a b c; do
      [[ $x == "$y" ]] && continue
      nsx "$P-$x" ip neigh replace "${ADDR[$y]}" lladdr "${MAC[$y]}" dev eth0 nud permanent
    done
  done
  nsx "$NS_A" ip route add 224.0.0.0/4 dev eth0
  echo "lab.sh: up: $NS_A ${ADDR[a]} -- [$NS_R r-a|r-b|r-c] -- $NS_B ${ADDR[b]}, $NS_C ${ADDR[c]}"
}

status() {
  local ns
  for ns in "${ALL_NS[@]}"; do
    if ip netns list | awk '{print $1}' | grep -qx "$ns"; then
      echo "== $ns"
      nsx "$ns" ip -br addr
    else
      echo "== $ns (absent)"
    fi
  done
}

case ${1:-} in
  up) up ;;
  down) ((EUID == 0)) || die "must run as root"; down; echo "lab.sh: down" ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
