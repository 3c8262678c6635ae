# Helpers shared by scripts/lab.sh and scripts/lab-l3.sh (sourced; each
# script defines its own `die`).

# nsx NS CMD...: runs CMD inside network namespace NS.
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

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
