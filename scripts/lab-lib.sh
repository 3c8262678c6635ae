# Helpers shared by scripts/lab.sh and scripts/lab-l3.sh (sourced; each
# script defines its own `die`).

# nsx NS CMD...: runs CMD inside network namespace NS.
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# queues NS DEV N: gives DEV N receive and N transmit queues (ethtool -L;
# a veth offers up to one per CPU). The AF_XDP backend binds a socket per
# receive queue and needs one per worker; a host end with N transmit
# queues spreads its flows over the router's N receive queues, as RSS
# spreads them over a real NIC's.
queues() {
  local ns=$1 dev=$2 n=$3
  command -v ethtool >/dev/null || die "LAB_QUEUES needs ethtool"
  nsx "$ns" ethtool -L "$dev" rx "$n" tx "$n" ||
    die "cannot give $dev $n queues in $ns (ethtool -L $dev rx $n tx $n; a veth has at most one per CPU)"
}

# nsysctl NS key=value...: sets sysctls inside NS through /proc/sys (the
# net.* keys are per namespace; interface names here have no dots), so
# the labs need no procps: only iproute2 (and ethtool, if present).
nsysctl() {
  local ns=$1 kv key
  shift
  for kv in "$@"; do
    key=${kv%%=*}
    nsx "$ns" sh -c 'echo "$2" > "/proc/sys/$1"' - "${key//.//}" "${kv#*=}" ||
      die "cannot set $key in $ns"
  done
}
