#!/usr/bin/env bash
# Stop the single-node SLURM cluster that scripts/slurm/setup-cluster.sh started.
#
#   sudo scripts/slurm/stop-cluster.sh
#
# Stops only the daemons setup-cluster.sh recorded as started by it (in
# /run/aihpc-slurm/started), by the pid in their pid files, slurmd first, then
# slurmctld, then munged.  Running jobs are killed with slurmd.  Packages,
# slurm.conf, the munge key and the logs stay.  Exit 0 when nothing recorded
# is left running; non-zero with one line on stderr otherwise.

set -u -o pipefail

STATE_DIR=/run/aihpc-slurm
declare -A PIDFILE=(
    [slurmd]="$STATE_DIR/slurmd.pid"
    [slurmctld]="$STATE_DIR/slurmctld.pid"
    [munged]=/run/munge/munged.pid
)

[ "$(id -u)" -eq 0 ] || { echo "stop-cluster: must run as root, running as uid $(id -u)" >&2; exit 1; }
[ -f "$STATE_DIR/started" ] || exit 0   # nothing started by setup-cluster.sh

status=0
for daemon in slurmd slurmctld munged; do
    grep -qx "$daemon" "$STATE_DIR/started" || continue
    pidfile="${PIDFILE[$daemon]}"
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
    sed -i "/^$daemon\$/d" "$STATE_DIR/started"
done
[ -s "$STATE_DIR/started" ] || rm -f "$STATE_DIR/started"
exit "$status"
