#!/usr/bin/env bash
# Stop the SLURM cluster that scripts/slurm/setup-cluster.sh started.
#
#   sudo scripts/slurm/stop-cluster.sh
#
# Stops only what setup-cluster.sh recorded as started by it (in
# /run/aihpc-slurm/started): first the namespace nodes of --nodes N (every
# process in each node's network namespace: its slurmd, the jobs' steps and
# their children), then their namespaces, links and addresses, then this host's
# slurmd, slurmctld and munged, by the pid in their pid files.  Running jobs are
# killed with their slurmd.  Packages, slurm.conf, the munge key and the logs
# stay.  Exit 0 when nothing recorded is left; non-zero with one line on stderr
# otherwise.

set -u -o pipefail

STATE_DIR=/run/aihpc-slurm
host="$(hostname -s)"
declare -A PIDFILE=(
    [slurmd]="$STATE_DIR/slurmd-$host.pid"
    [slurmctld]="$STATE_DIR/slurmctld.pid"
    [munged]=/run/munge/munged.pid
)
# shellcheck source=netns.sh
. "$(dirname "$0")/netns.sh"

[ "$(id -u)" -eq 0 ] || { echo "stop-cluster: must run as root, running as uid $(id -u)" >&2; exit 1; }
[ -f "$STATE_DIR/started" ] || exit 0   # nothing started by setup-cluster.sh

forget() { sed -i "/^$1\$/d" "$STATE_DIR/started"; }

# Send TERM, then KILL after 10 s, to every process in node $1's namespace; 0 once none is left.
stop_node() {
    local pids
    pids="$(netns_pids "$1")"
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null
    for _ in $(seq 100); do [ -z "$(netns_pids "$1")" ] && return 0; sleep 0.1; done
    # shellcheck disable=SC2046
    kill -KILL $(netns_pids "$1") 2>/dev/null
    for _ in $(seq 50); do [ -z "$(netns_pids "$1")" ] && return 0; sleep 0.1; done
    return 1
}

status=0
nodes="$(sed -n 's/^node \([0-9][0-9]*\)$/\1/p' "$STATE_DIR/started")"
for i in $nodes; do
    if stop_node "$i"; then
        forget "node $i"
    else
        echo "stop-cluster: processes still in node $(netns_name "$i")'s namespace 15 s after SIGTERM" >&2
        status=1
    fi
done
if [ "$status" -eq 0 ] && [ -n "$nodes" ]; then
    why="$(netns_down 2>&1)" || { echo "stop-cluster: cannot remove the namespace nodes: ${why:-ip failed}" >&2; status=1; }
fi

for daemon in slurmd slurmctld munged; do
    grep -qx "$daemon" "$STATE_DIR/started" || continue
    pidfile="${PIDFILE[$daemon]}"
    # slurmd.pid: its name before each node's slurmd had its own pid file
    [ "$daemon" = slurmd ] && [ ! -f "$pidfile" ] && pidfile="$STATE_DIR/slurmd.pid"
    pid="$(cat "$pidfile" 2>/dev/null)"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "stop-cluster: $daemon (pid $pid) still running 10 s after SIGTERM" >&2
            status=1
            continue
        fi
    fi
    forget "$daemon"
done
[ -s "$STATE_DIR/started" ] || rm -f "$STATE_DIR/started"
exit "$status"
