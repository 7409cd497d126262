"""Starting the ranks of ``aihpc bench distributed``, and reading rank 0's report.

Two launchers, one rank program (``python -m aihpc.bench.distributed_rank
FOLDER``, :mod:`aihpc.bench.distributed_rank`):

* **local**: the ranks are this node's processes, started as ``torchrun``
  starts them (``MASTER_ADDR=127.0.0.1``, a free port, ``RANK``,
  ``LOCAL_RANK``, ``WORLD_SIZE``), gloo over loopback unless an interface
  is named;
* **srun**: ``srun --nodes N --ntasks P`` starts them on a SLURM
  allocation's nodes (inside an allocation, its own; from a login node, one
  srun asks for).  Each rank takes its number from ``SLURM_PROCID``; rank 0
  serves the rendezvous on its address (on ``--interface``, where given) and
  writes it into FOLDER, which must therefore be on a file system every node
  sees, as a run directory must.

Either way each rank writes its stderr to ``FOLDER/rank<N>.err``; the first
rank that fails is named with the last line it wrote.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aihpc.base.errors import RunFailure

STOP_WAIT_S = 10.0
"""How long a rank (or srun) has to end after SIGTERM before it is killed."""


@dataclass(frozen=True)
class RankReport:
    """What rank 0 hands back (as JSON): per-step ``[ddp s, compute s, all-reduce s]`` (maxima over
    the ranks), the gradient bytes, bytes per rank and call measured (None: not measured), and
    what the ranks ran on: each rank's host, the device, the backend and the threads per rank."""

    times: list[list[float]]
    gradient_bytes: int
    hosts: list[str]
    device: str
    backend: str
    threads: int
    interface: str | None = None
    tcp_bytes_per_rank: float | None = None
    interface_bytes_per_rank: float | None = None


@dataclass(frozen=True)
class Launcher:
    """Where the ranks run: ``srun`` over ``nodes`` nodes of ``partition`` (None: the default),
    or on this node; ``interface`` names the network gloo uses (None: loopback on this node,
    the system's choice across nodes)."""

    srun: bool = False
    nodes: int = 1
    partition: str | None = None
    interface: str | None = None


def launch(
    spec: dict[str, Any], procs: int, launcher: Launcher, shared_dir: Path | None = None
) -> RankReport:
    """Run ``procs`` ranks of the benchmark ``spec`` describes; rank 0's report (RunFailure naming
    a rank that failed).  ``shared_dir``: where the ranks' folder is made (default the system's
    temporary folder; with srun it must be seen by every node)."""
    with tempfile.TemporaryDirectory(prefix="aihpc-bench-ddp-", dir=shared_dir) as tmp:
        folder = Path(tmp)
        (folder / "config.json").write_text(json.dumps(spec))
        if launcher.srun:
            _srun(folder, procs, spec["threads"], launcher)
        else:
            _local(folder, procs, spec["threads"], launcher.interface)
        return RankReport(**json.loads((folder / "result.json").read_text()))


def _local(folder: Path, procs: int, threads: int, interface: str | None) -> None:
    """The ranks as this node's processes, started as torchrun starts them."""
    port = _free_port()
    ranks = []
    try:
        for rank in range(procs):
            env = {
                **os.environ,
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(procs),
                "OMP_NUM_THREADS": str(threads),
                # all ranks are on this node: gloo talks over loopback unless told otherwise
                "GLOO_SOCKET_IFNAME": interface or os.environ.get("GLOO_SOCKET_IFNAME", "lo"),
            }
            with open(folder / f"rank{rank}.err", "w") as err:
                ranks.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "aihpc.bench.distributed_rank", str(folder)],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                    )
                )
        _wait(ranks, folder, procs)
    finally:
        _kill(ranks)


def _srun(folder: Path, procs: int, threads: int | None, launcher: Launcher) -> None:
    """The ranks as the tasks of one ``srun``, ``ceil(procs / nodes)`` a node."""
    nodes = min(launcher.nodes, procs)
    command = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={procs}",
        f"--ntasks-per-node={math.ceil(procs / nodes)}",
        "--kill-on-bad-exit=1",
        "--output=/dev/null",
        f"--error={folder}/rank%t.err",
        *([f"--partition={launcher.partition}"] if launcher.partition else []),
        *([f"--cpus-per-task={threads}"] if threads else []),
        *[sys.executable, "-m", "aihpc.bench.distributed_rank", str(folder)],
    ]
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    if launcher.interface:
        env["GLOO_SOCKET_IFNAME"] = launcher.interface
    srun = None
    try:
        with open(folder / "srun.err", "w") as err:
            srun = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _wait([srun], folder, procs, srun=True)
    finally:
        _kill([srun] if srun is not None else [])


def _wait(
    processes: list[subprocess.Popen[bytes]], folder: Path, procs: int, srun: bool = False
) -> None:
    """Wait for every process; at the first failure, raise naming the rank that failed (with srun:
    the first rank that wrote an error, else srun itself) with the last line it wrote."""
    while True:
        codes = [p.poll() for p in processes]
        if all(code == 0 for code in codes):
            return
        failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            code = codes[failed[0]]
            rank = _first_rank_with_errors(folder, procs) if srun else failed[0]
            name = f"rank {rank} of {procs}" if rank is not None else "srun"
            path = folder / (f"rank{rank}.err" if rank is not None else "srun.err")
            lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
            for line in lines[-20:]:
                print(f"{name}: {line}", file=sys.stderr)
            raise RunFailure(f"{name} failed: {lines[-1] if lines else f'exit code {code}'}")
        time.sleep(0.05)


def _first_rank_with_errors(folder: Path, procs: int) -> int | None:
    """The lowest rank whose error file ends in a Python error line, else the lowest with any
    output (srun's own messages name no rank: None)."""
    written = [
        (rank, path.read_text(errors="replace").strip())
        for rank in range(procs)
        if (path := folder / f"rank{rank}.err").exists()
    ]
    for rank, text in written:
        last = text.splitlines()[-1] if text else ""
        if "Error" in last.split(":", 1)[0]:
            return rank
    return next((rank for rank, text in written if text), None)


def _kill(processes: list[subprocess.Popen[bytes]]) -> None:
    """Only ours, and only those still running (interrupted, or a peer failed): SIGTERM (srun
    passes it on to its tasks and ends the step), then SIGKILL after ``STOP_WAIT_S``."""
    running = [p for p in processes if p.poll() is None]
    for p in running:
        p.terminate()
    for p in running:
        try:
            p.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
