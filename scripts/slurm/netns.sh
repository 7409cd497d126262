# Compute nodes in network namespaces, for setup-cluster.sh --nodes N and stop-cluster.sh.
# Sourced, not run.  Names and addresses, all made by these functions and nothing else:
#
#   login side (the root namespace: slurmctld, the master, the Dask scheduler)
#     bridge  aihpc0   10.217.0.1/24
#   node i (1..N), network namespace aihpc-n<i>, host name aihpc-n<i> (its own UTS namespace)
#     aihpc0  10.217.0.<10+i>/24, a veth whose other end, aihpc-v<i>, is on the bridge
#
# The bridge and the nodes' interfaces share one name, aihpc0, as ib0 is the same name on a
# real cluster's login and compute nodes: `--interface aihpc0` means the same on both sides.
# The nodes have no default route: they reach the login side and each other over the
# bridge and nothing else (a scheduler bound to loopback or to the host's own address
# is unreachable from them, as on a real cluster).

NETNS_BRIDGE=aihpc0
NETNS_PREFIX=10.217.0
NETNS_LOGIN_ADDR="$NETNS_PREFIX.1"
# The bridge's own hardware address (locally administered).  A bridge left to choose takes the
# lowest of its ports' addresses and changes it when that port goes: a node taken down (its veth
# deleted) would then leave every other node's ARP entry for the login address stale, cutting
# them off the scheduler for as long as the entry lives -- a switch does not do that.
NETNS_BRIDGE_MAC=02:a1:4c:00:00:01

netns_name() { echo "aihpc-n$1"; }
netns_addr() { echo "$NETNS_PREFIX.$((10 + $1))"; }

# The bridge, once; fails if the subnet is already used by an interface not made here.
netns_bridge_up() {
    if ! ip link show "$NETNS_BRIDGE" >/dev/null 2>&1; then
        local used
        used="$(ip -4 -o addr show | awk -v p="$NETNS_PREFIX." 'index($4, p) == 1 {print $2}' | head -n1)"
        [ -z "$used" ] || { echo "subnet $NETNS_PREFIX.0/24 is already used by interface $used"; return 1; }
        ip link add "$NETNS_BRIDGE" type bridge || return 1
        ip addr add "$NETNS_LOGIN_ADDR/24" dev "$NETNS_BRIDGE" || return 1
    fi
    ip link set "$NETNS_BRIDGE" address "$NETNS_BRIDGE_MAC" || return 1
    ip link set "$NETNS_BRIDGE" up
}

# Node $1's namespace, its veth pair on the bridge and its address; idempotent.
netns_node_up() {
    local i="$1" ns veth addr
    ns="$(netns_name "$i")"; veth="aihpc-v$i"; addr="$(netns_addr "$i")"
    ip netns list | awk '{print $1}' | grep -qx "$ns" || ip netns add "$ns" || return 1
    if ! ip link show "$veth" >/dev/null 2>&1; then
        ip link add "$veth" type veth peer name "aihpc-p$i" || return 1
        ip link set "aihpc-p$i" netns "$ns" || return 1
        ip -n "$ns" link set "aihpc-p$i" name "$NETNS_BRIDGE" || return 1
        ip -n "$ns" addr add "$addr/24" dev "$NETNS_BRIDGE" || return 1
    fi
    ip link set "$veth" master "$NETNS_BRIDGE" && ip link set "$veth" up \
        && ip -n "$ns" link set lo up && ip -n "$ns" link set "$NETNS_BRIDGE" up
}

# Run a command on node $1: in its network namespace, with its own host name.  nsenter, not
# `ip netns exec`: that one also remounts /sys for the namespace, which hides the cgroup
# file system slurmd needs.
netns_exec() {
    local i="$1"; shift
    nsenter --net="/run/netns/$(netns_name "$i")" unshare --uts -- \
        sh -c 'hostname "$0" && exec "$@"' "$(netns_name "$i")" "$@"
}

# Every process in node $1's namespace (its slurmd, the jobs' steps and their children).
netns_pids() { ip netns pids "$(netns_name "$1")" 2>/dev/null; }

# The namespaces, links and addresses the functions above made (the nodes' processes must
# be gone first: a namespace with processes in it outlives `ip netns del`).
netns_down() {
    local ns link
    for ns in $(ip netns list | awk '$1 ~ /^aihpc-n[0-9]+$/ {print $1}'); do
        ip netns del "$ns" || return 1
    done
    for link in $(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^aihpc-v[0-9]+$'); do
        ip link del "$link" 2>/dev/null
    done
    if ip link show "$NETNS_BRIDGE" >/dev/null 2>&1; then ip link del "$NETNS_BRIDGE" || return 1; fi
}
