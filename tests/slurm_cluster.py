"""The real SLURM cluster of the tests: this host and two nodes in network namespaces.

``scripts/slurm/setup-cluster.sh --nodes 2 --no-install`` starts it once per
test session (the ``slurm_up`` fixture of tests/conftest.py), for the
one-node tests (tests/launch/test_slurm.py, partition ``debug``: this host)
and the multi-node ones (tests/runner/test_multinode.py, partition ``netns``:
the nodes ``aihpc-n1`` and ``aihpc-n2``).  It never installs packages; where it
cannot start (no root, no packages, no namespaces) the tests that need it
skip with the reason.  It is stopped at the end unless it was running before.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "slurm"
HOST = socket.gethostname().split(".")[0]
NODES = ("aihpc-n1", "aihpc-n2")
PARTITION = "netns"  # the namespace nodes' partition
INTERFACE = "aihpc0"  # the bridge on the login side, each node's veth inside its namespace
LOGIN_ADDRESS = "10.217.0.1"
NODE_ADDRESSES = {"aihpc-n1": "10.217.0.11", "aihpc-n2": "10.217.0.12"}


@dataclass(frozen=True)
class Cluster:
    host: str  # this host: slurmctld, the master and the scheduler; the node of partition debug
    nodes: tuple[str, ...]  # the namespace nodes, partition netns; () where they could not start
    start_seconds: float  # how long setup-cluster.sh took in this session
    nodes_missing: str | None  # why there are no namespace nodes (setup-cluster.sh's error)


def sh(*cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)


def controller_answers() -> bool:
    try:
        return sh("sinfo", "-h", timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def queued(ids: list[str]) -> dict[str, str]:
    """Job id -> state for those of ``ids`` squeue still shows."""
    out = sh("squeue", "-h", "-o", "%i %T").stdout
    rows = dict(line.split() for line in out.splitlines() if line.strip())
    return {i: rows[i] for i in ids if i in rows}


def state() -> str:
    """What the cluster shows now (its jobs and nodes), for a failing test's message."""
    jobs = sh("squeue", "-h", "-o", "%i %j %T %R", timeout=10).stdout.strip()
    nodes = sh("sinfo", "-h", "-N", "-o", "%N %T %E", timeout=10).stdout.strip()
    return f"squeue: {jobs or '(none)'}; sinfo: {nodes or '(no answer)'}"


def wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout:.0f} s ({state()})")
        time.sleep(0.2)


def start(nodes: int = len(NODES)) -> tuple[float, str | None]:
    """Run setup-cluster.sh --nodes ``nodes``; (seconds it took, why it failed or None)."""
    if os.geteuid() != 0:
        return 0.0, f"setup-cluster.sh needs root, running as uid {os.geteuid()}"
    began = time.monotonic()
    try:
        proc = sh(
            str(SCRIPTS / "setup-cluster.sh"), "--nodes", str(nodes), "--no-install", timeout=180
        )
    except subprocess.TimeoutExpired:
        return time.monotonic() - began, "setup-cluster.sh ran over 180 s"
    if proc.returncode != 0:
        return time.monotonic() - began, (
            proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"]
        )[-1]
    return time.monotonic() - began, None


def start_cluster() -> Cluster:
    """This host and the namespace nodes; this host alone (``nodes_missing`` says why) where
    namespaces cannot be made; pytest.skip where SLURM cannot start at all."""
    seconds, why = start()
    if why is None:
        return Cluster(HOST, NODES, seconds, None)
    alone, why_alone = start(1)
    if why_alone is not None:
        pytest.skip(f"SLURM could not be started: {why_alone}")
    return Cluster(HOST, (), alone, why)


def stop() -> subprocess.CompletedProcess[str]:
    return sh(str(SCRIPTS / "stop-cluster.sh"), timeout=120)
