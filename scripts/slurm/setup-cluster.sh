#!/usr/bin/env bash
# Start a SLURM cluster on THIS host, for trying and testing aihpc's SLURM path:
# one node (this host), or with --nodes N also N compute nodes in network
# namespaces (scripts/slurm/netns.sh).  Idempotent: run it again and it only
# starts what is not running.
#
#   sudo scripts/slurm/setup-cluster.sh [--nodes N] [--no-install | --install-only]
#
# --nodes N (N >= 2): N more nodes, aihpc-n1..aihpc-nN, each a slurmd in its own
# network and UTS namespace (its own host name and address, 10.217.0.11..),
# joined to this host by the bridge aihpc0 (10.217.0.1), in the partition
# "netns".  This host stays the login side (slurmctld, the master, the Dask
# scheduler) and the node of the default partition "debug".  The machine's file
# system is shared by all, as an NFS or Lustre mount would be on a real
# cluster; its cores are too: each namespace node declares nproc/N CPUs.
#
# What it does, in order:
#   1. installs Debian's slurmd, slurmctld, slurm-client and munge if missing
#      (apt-get update first, non-interactive); --no-install fails instead;
#   2. writes /etc/slurm/slurm.conf for this host (hostname -s, nproc CPUs,
#      `free -m` memory minus a margin) -- never over a slurm.conf it did not write;
#   3. creates the munge key if missing, starts munged as user munge, then
#      slurmctld and slurmd (no systemd needed: the daemons are started directly);
#      a slurmctld it starts begins with no jobs and every node up: nothing of an
#      earlier cluster's state (a job whose node was lost would be requeued and
#      run again; a node left down would stay down);
#   4. with --nodes N, makes the namespaces and starts a slurmd in each;
#   5. waits (bounded) until `sinfo` shows every node idle.
#
# Exit 0 when the cluster is up; otherwise non-zero with ONE line on stderr
# starting "setup-cluster: ".  scripts/slurm/stop-cluster.sh stops the daemons
# this script started (it records them in $STATE_DIR/started).
#
# Environment: AIHPC_SLURM_WAIT (seconds to wait for the node, default 60).

set -u -o pipefail

CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
MARKER="# Written by aihpc scripts/slurm/setup-cluster.sh"
SPOOL=/var/spool/aihpc-slurm
LOG_DIR=/var/log/slurm
STATE_DIR=/run/aihpc-slurm
MUNGE_KEY=/etc/munge/munge.key
MUNGE_PID=/run/munge/munged.pid
CTLD_PID="$STATE_DIR/slurmctld.pid"
SLURMD_PID="$STATE_DIR/slurmd-$(hostname -s).pid"
WAIT="${AIHPC_SLURM_WAIT:-60}"
INSTALL=1
INSTALL_ONLY=0
NODES=1

fail() { echo "setup-cluster: $*" >&2; exit 1; }

while [ "$#" -gt 0 ]; do
    case "$1" in
        --no-install) INSTALL=0 ;;
        --install-only) INSTALL_ONLY=1 ;;
        --nodes) shift; NODES="${1:-}" ;;
        --nodes=*) NODES="${1#--nodes=}" ;;
        -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
        *) fail "unknown argument '$1' (only --nodes N, --no-install or --install-only)" ;;
    esac
    shift
done
case "$NODES" in
    ''|*[!0-9]*) fail "--nodes must be an integer >= 1, got '$NODES'" ;;
esac
[ "$NODES" -ge 1 ] && [ "$NODES" -le 16 ] || fail "--nodes must be in 1..16, got $NODES"
# shellcheck source=netns.sh
. "$(dirname "$0")/netns.sh"

[ "$(id -u)" -eq 0 ] || fail "must run as root, running as uid $(id -u)"

# ---- 1. packages -----------------------------------------------------------
missing=()
for pkg in slurmd slurmctld slurm-client munge; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$INSTALL" -eq 1 ] || { echo "setup-cluster: packages missing: ${missing[*]} (run without --no-install)" >&2; exit 3; }
    command -v apt-get >/dev/null || fail "packages missing (${missing[*]}) and no apt-get to install them"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1 || fail "apt-get update failed"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
        || fail "apt-get install ${missing[*]} failed"
fi
[ "$INSTALL_ONLY" -eq 1 ] && exit 0
if [ "$NODES" -gt 1 ]; then
    command -v ip >/dev/null || fail "--nodes $NODES needs the ip command (iproute2)"
    for tool in unshare nsenter; do
        command -v "$tool" >/dev/null || fail "--nodes $NODES needs the $tool command (util-linux)"
    done
fi

# ---- 2. slurm.conf -----------------------------------------------------------
host="$(hostname -s)"
# nproc honours OMP_NUM_THREADS (Dask sets it to 1 in processes that start a
# LocalCluster): count the CPUs this process may run on, not a thread setting.
cpus="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"
total_mb="$(free -m | awk '/^Mem:/ {print $2}')"
# slurmd drains a node whose real memory is below RealMemory: leave a margin of
# 5 % (at least 256 MiB) for the OS and the daemons.
margin=$(( total_mb / 20 )); [ "$margin" -lt 256 ] && margin=256
mem=$(( total_mb - margin )); [ "$mem" -lt 256 ] && mem=256

mkdir -p "$CONF_DIR" "$SPOOL/ctld" "$LOG_DIR" "$STATE_DIR"
if [ -f "$CONF" ] && ! grep -qF "$MARKER" "$CONF"; then
    fail "$CONF exists and was not written by this script; refusing to overwrite it"
fi

# The namespace nodes reach slurmctld at the bridge's address; one node needs no address.
controller="$host"
node_lines=""
if [ "$NODES" -gt 1 ]; then
    controller="$host($NETNS_LOGIN_ADDR)"
    node_cpus=$(( cpus / NODES )); [ "$node_cpus" -lt 1 ] && node_cpus=1
    node_mem=$(( mem / NODES )); [ "$node_mem" -lt 256 ] && node_mem=256
    for i in $(seq "$NODES"); do
        node_lines="${node_lines}NodeName=$(netns_name "$i") NodeAddr=$(netns_addr "$i") CPUs=$node_cpus RealMemory=$node_mem State=UNKNOWN
"
    done
    node_lines="${node_lines}PartitionName=netns Nodes=aihpc-n[1-$NODES] Default=NO MaxTime=INFINITE State=UP OverSubscribe=NO"
fi

new_conf="$(cat <<EOF
$MARKER for host $host; edit at your own risk.
ClusterName=aihpc
SlurmctldHost=$controller
# Daemons run as root: no slurm user to create, and slurmd must be root anyway.
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
# No cgroup plugins: they need a writable, delegated cgroup hierarchy that
# containers and VMs often lack.  linuxproc tracks job processes through
# /proc (parent pid), task/none does no CPU binding.  Good enough for one node.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Allocate single CPUs (not whole nodes), memory not consumable: two 1-CPU jobs
# run side by side on a 2-CPU machine; --mem is checked against RealMemory only.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# A node that was down comes back by itself once slurmd registers again.
ReturnToService=2
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d-%n
SlurmctldPidFile=$CTLD_PID
# %n: each node's slurmd (this host's and the namespace nodes') has its own files.
SlurmdPidFile=$STATE_DIR/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
# No slurmdbd: accounting storage is off, so plain \`sacct\` shows nothing;
# finished jobs go to a job-completion text file that \`sacct -c\` reads.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.txt
# Keep finished jobs visible to \`scontrol show job\` for 5 minutes.
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=60
KillWait=5
InactiveLimit=0
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
$node_lines
EOF
)"
conf_changed=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$new_conf" ]; then
    printf '%s\n' "$new_conf" > "$CONF" || fail "cannot write $CONF"
    conf_changed=1
fi

# ---- 3. daemons ---------------------------------------------------------------
alive() { [ -f "$1" ] && kill -0 "$(cat "$1" 2>/dev/null)" 2>/dev/null; }
record() { grep -qx "$1" "$STATE_DIR/started" 2>/dev/null || echo "$1" >> "$STATE_DIR/started"; }

if [ ! -s "$MUNGE_KEY" ]; then
    mkdir -p /etc/munge
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile="$MUNGE_KEY" >/dev/null 2>&1 || fail "mungekey --create failed"
    else
        dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none || fail "cannot create $MUNGE_KEY"
    fi
fi
chown munge:munge /etc/munge "$MUNGE_KEY" && chmod 700 /etc/munge && chmod 400 "$MUNGE_KEY" \
    || fail "cannot set owner/mode of $MUNGE_KEY"

if ! alive "$MUNGE_PID"; then
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 755 /run/munge
    runuser -u munge -- /usr/sbin/munged --force >/dev/null 2>&1 || fail "munged failed to start (see /var/log/munge/munged.log)"
    record munged
fi
munge -n | unmunge >/dev/null 2>&1 || fail "munge does not work: 'munge -n | unmunge' failed"

stop_pid() {
    local pid
    pid="$(cat "$1" 2>/dev/null)" || return 0
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}
if [ "$conf_changed" -eq 1 ]; then
    # A running daemon would keep the old node definitions: restart them all
    # (slurmd.pid: the name before each node's slurmd had its own pid file).
    for pidfile in "$STATE_DIR"/slurmd-*.pid "$STATE_DIR/slurmd.pid" "$CTLD_PID"; do
        alive "$pidfile" && stop_pid "$pidfile"
    done
fi
if ! alive "$CTLD_PID"; then
    # -c: recover no state (jobs, node states) from an earlier start.
    /usr/sbin/slurmctld -c >/dev/null 2>&1 || fail "slurmctld failed to start (see $LOG_DIR/slurmctld.log)"
    record slurmctld
fi
if ! alive "$SLURMD_PID"; then
    mkdir -p "$SPOOL/d-$host"
    /usr/sbin/slurmd >/dev/null 2>&1 || fail "slurmd failed to start (see $LOG_DIR/slurmd-$host.log)"
    record slurmd
fi

# ---- 4. the namespace nodes ------------------------------------------------------------
names=("$host")
if [ "$NODES" -gt 1 ]; then
    why="$(netns_bridge_up 2>&1)" || fail "cannot make the bridge $NETNS_BRIDGE: ${why:-ip failed}"
    for i in $(seq "$NODES"); do
        node="$(netns_name "$i")"
        names+=("$node")
        why="$(netns_node_up "$i" 2>&1)" || fail "cannot make node $node's namespace: ${why:-ip failed}"
        if ! alive "$STATE_DIR/slurmd-$node.pid"; then
            mkdir -p "$SPOOL/d-$node"
            netns_exec "$i" /usr/sbin/slurmd >/dev/null 2>&1 \
                || fail "slurmd of node $node failed to start (see $LOG_DIR/slurmd-$node.log)"
        fi
        record "node $i"
    done
fi

# ---- 5. wait for the nodes ---------------------------------------------------------
deadline=$(( $(date +%s) + WAIT ))
for node in "${names[@]}"; do
    state=""
    while :; do
        state="$(sinfo -h -n "$node" -o '%T' 2>/dev/null | head -n1)"
        case "$state" in
            idle|mixed|allocated|completing) break ;;
            drain*|down*|fail*)
                # A node left down by an earlier run: ReturnToService=2 only acts on
                # registration, so resume it explicitly once.
                scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 ;;
        esac
        if [ "$(date +%s)" -ge "$deadline" ]; then
            reason="$(sinfo -h -n "$node" -o '%E' 2>/dev/null | head -n1)"
            fail "node $node not idle after ${WAIT}s (state '${state:-no answer from slurmctld}'${reason:+, reason: $reason}); see $LOG_DIR/"
        fi
        sleep 0.5
    done
done
exit 0
