"""Dask workers on SLURM: as batch jobs from outside, or as ``srun`` tasks inside an allocation.

Two ways to run ``aihpc run`` on a SLURM cluster:

* **From a login node** (:func:`slurm_cluster`): the master and the Dask
  scheduler run here; every worker is its own ``sbatch`` job (one Dask worker
  per job, one Dask thread, ``cores_per_worker`` CPUs booked for torch's
  threads).  The worker jobs must reach the scheduler: by default it listens on
  all interfaces and advertises this host's outward IP address, which is right
  on one node and on most clusters; give ``interface="ib0"`` (workers and
  scheduler use that interface) or ``scheduler_host`` (an address of this
  host the compute nodes can reach) where it is not.

* **Inside an allocation** (:func:`runner_context`, under ``srun``): every
  task runs this same program; rank 0 runs the scheduler and the body of the
  ``with`` block (the master), every rank -- rank 0 too -- runs one Dask worker
  process.  The scheduler's address goes through a JSON file on a path all
  nodes share.  dask-jobqueue's ``SLURMRunner`` spends rank 0 on the scheduler
  and rank 1 on the client, which would leave two GPUs idle; this module does
  the same with rank 0 doing both and hosting a worker as well.

Worker names end in an integer index: ``slurm-<i>`` for batch jobs (``i``
counts the jobs submitted, from 0), ``slurm-<rank>`` inside an allocation.

SLURM problems the user can fix (no ``sbatch``, no controller, an unknown
partition, bad sizes) raise :class:`aihpc.errors.ConfigError` before any job
is submitted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.errors import ConfigError
from aihpc.runner.batch import MALLOC_PROLOGUE, run_security

if TYPE_CHECKING:  # pragma: no cover
    from dask_jobqueue import SLURMCluster
    from distributed import Client


# SLURM's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_WALLTIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")


@dataclass(frozen=True)
class SlurmTask:
    """This process's place in a SLURM allocation (from srun's environment)."""

    job_id: str
    rank: int  # SLURM_PROCID: 0 .. ntasks-1 over the whole step
    ntasks: int  # SLURM_NTASKS (1 outside srun)
    local_id: int  # SLURM_LOCALID: rank among the tasks on this node
    nodes: int  # SLURM_JOB_NUM_NODES
    cpus_per_task: int  # SLURM_CPUS_PER_TASK (1 when not set)


def in_allocation() -> bool:
    """True inside a SLURM job (``SLURM_JOB_ID`` is set), e.g. under sbatch, salloc or srun."""
    return bool(os.environ.get("SLURM_JOB_ID"))


def current_task() -> SlurmTask:
    """This process's :class:`SlurmTask`; ConfigError outside a SLURM job."""
    env = os.environ
    if not in_allocation():
        raise ConfigError("not inside a SLURM allocation: SLURM_JOB_ID is not set (use sbatch/salloc and srun)")

    def number(name: str, default: int) -> int:
        value = env.get(name, "")
        match = re.match(r"\d+", value)  # SLURM_CPUS_PER_TASK may read "4", SLURM_JOB_NUM_NODES "2"
        return int(match.group()) if match else default

    return SlurmTask(
        job_id=env["SLURM_JOB_ID"],
        rank=number("SLURM_PROCID", 0),
        ntasks=number("SLURM_NTASKS", 1),
        local_id=number("SLURM_LOCALID", 0),
        nodes=number("SLURM_JOB_NUM_NODES", 1),
        cpus_per_task=number("SLURM_CPUS_PER_TASK", 1),
    )


def check_slurm(partition: str | None = None) -> None:
    """ConfigError unless ``sbatch`` exists, the controller answers and ``partition`` (if given) exists."""
    for tool in ("sbatch", "scancel", "squeue"):
        if shutil.which(tool) is None:
            raise ConfigError(f"SLURM's {tool} is not on PATH; is this a SLURM login node? (PATH={os.environ.get('PATH', '')})")
    command = ["scontrol", "show", "partition"] + ([partition] if partition else [])
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot query the SLURM controller with '{' '.join(command)}': {exc}") from None
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        first = message[0] if message else f"exit code {result.returncode}"
        if partition and "not found" in first:
            known = _partitions()
            raise ConfigError(f"SLURM partition must exist, got {partition!r} (known: {', '.join(known) or 'none'})")
        raise ConfigError(f"SLURM controller did not answer '{' '.join(command)}': {first}")


def _partitions() -> list[str]:
    result = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    return [p.rstrip("*") for p in result.stdout.split()] if result.returncode == 0 else []


def slurm_cluster(
    workers: int,
    cores_per_worker: int,
    memory_per_worker: str,
    gpus_per_node: int = 0,
    partition: str | None = None,
    walltime: str = "01:00:00",
    python: str | None = None,
    extra_directives: Sequence[str] = (),
    local_directory: str | os.PathLike[str] | None = None,
    interface: str | None = None,
    scheduler_host: str | None = None,
    log_directory: str | os.PathLike[str] | None = None,
    tls: bool = True,
    shared_temp_directory: str | os.PathLike[str] | None = None,
) -> SLURMCluster:
    """Start a Dask scheduler here and ``workers`` SLURM batch jobs of one Dask worker each.

    Each job books ``cores_per_worker`` CPUs (``--cpus-per-task``; the job
    exports ``OMP_NUM_THREADS`` to match) and ``memory_per_worker`` (a Dask
    size string, e.g. ``"8GiB"``, also the worker's memory limit); the worker
    runs one task at a time (one Dask thread).  ``gpus_per_node > 0`` makes
    every job ask for one GPU (``--gres=gpu:1``), so SLURM packs up to
    ``gpus_per_node`` workers on a node.  ``walltime`` is SLURM's format
    (``HH:MM:SS``, ``D-HH:MM:SS``, minutes).  ``python`` is the interpreter the
    jobs run (default: this one -- so this venv must be on a shared path).
    ``extra_directives`` are added as ``#SBATCH <directive>`` lines, e.g.
    ``["--account=proj", "--qos=short"]``.  ``local_directory`` is the
    workers' scratch space; ``log_directory`` receives each job's stdout and
    stderr (default: sbatch's, the current directory).  ``interface`` /
    ``scheduler_host``: see the module docstring.  ``tls``: scheduler and
    workers talk TLS with a certificate made for this run
    (``Security.temporary()``), so other users of the cluster cannot reach
    them; the workers' copy of it is written to ``shared_temp_directory``
    (readable by this user only), which every node must see.

    Returns once the jobs are submitted (``cluster.scale(jobs=workers)``);
    they may still be pending: ``Client(cluster).wait_for_workers(n)``
    waits for them.  Close the cluster to cancel the jobs.
    """
    _check_sizes(workers, cores_per_worker, memory_per_worker, gpus_per_node, walltime)
    if interface and scheduler_host:
        raise ConfigError(f"give interface or scheduler_host, not both, got {interface!r} and {scheduler_host!r}")
    if interface and not _has_interface(interface):
        raise ConfigError(f"network interface must exist on this host, got {interface!r}")
    for directive in extra_directives:
        if not directive.startswith("-") or "\n" in directive:
            raise ConfigError(f"extra SLURM directives are sbatch options like '--qos=short', got {directive!r}")
    check_slurm(partition)

    from dask_jobqueue import SLURMCluster

    directives = list(extra_directives)
    if gpus_per_node > 0:
        directives.append("--gres=gpu:1")
    scheduler_options: dict[str, Any] = {"dashboard": False, "dashboard_address": ":0"}
    if scheduler_host:
        scheduler_options["host"] = scheduler_host
    if log_directory is not None:
        log_directory = str(Path(log_directory).resolve())
    security = run_security(tls, shared_temp_directory)
    cluster = SLURMCluster(
        cores=1,  # Dask threads per job: one trial at a time
        processes=1,
        job_cpu=cores_per_worker,
        memory=memory_per_worker,
        queue=partition,
        walltime=walltime,
        python=python or sys.executable,
        job_extra_directives=directives,
        job_script_prologue=[f"export OMP_NUM_THREADS={cores_per_worker}", *MALLOC_PROLOGUE],
        security=security,
        protocol="tls://" if security else None,
        shared_temp_directory=str(shared_temp_directory) if shared_temp_directory is not None else None,
        local_directory=str(local_directory) if local_directory is not None else None,
        log_directory=log_directory,
        interface=interface,
        scheduler_options=scheduler_options,
        job_name="aihpc-worker",
        name="slurm",  # worker names: slurm-0, slurm-1, ...
    )
    cluster.scale(jobs=workers)
    return cluster


def job_ids(cluster: SLURMCluster) -> list[str]:
    """The SLURM job ids of the cluster's submitted worker jobs, in worker order (numeric ids sorted)."""
    ids = [str(job.job_id) for job in cluster.workers.values() if getattr(job, "job_id", None)]
    return sorted(ids, key=lambda j: (len(j), j))


def _check_sizes(workers: int, cores: int, memory: str, gpus_per_node: int, walltime: str) -> None:
    from dask.utils import parse_bytes

    if workers < 1:
        raise ConfigError(f"SLURM workers must be >= 1, got {workers}")
    if cores < 1:
        raise ConfigError(f"cores per SLURM worker must be >= 1, got {cores}")
    if gpus_per_node < 0:
        raise ConfigError(f"GPUs per node must be >= 0, got {gpus_per_node}")
    try:
        size = parse_bytes(memory)
    except (ValueError, TypeError):
        raise ConfigError(f"memory per SLURM worker must be a size like '4GiB', got {memory!r}") from None
    if size < 2**20:
        raise ConfigError(f"memory per SLURM worker must be >= 1MiB, got {memory!r}")
    if not _WALLTIME.match(walltime):
        raise ConfigError(f"walltime must be SLURM's [D-]HH:MM:SS (or minutes), got {walltime!r}")


def _has_interface(name: str) -> bool:
    import psutil

    return name in psutil.net_if_addrs()


# ---------------------------------------------------------------------------
# Inside an allocation: srun starts N copies of the program.


def default_scheduler_file(job_id: str, step_id: str | None = None) -> Path:
    """``./aihpc-scheduler-<job id>.<step id>.json`` (step from ``SLURM_STEP_ID``).

    The current directory is shared on most clusters; the step id keeps a
    second ``srun`` in the same job from reading the first one's file.
    """
    step = step_id if step_id is not None else os.environ.get("SLURM_STEP_ID", "0")
    return Path.cwd() / f"aihpc-scheduler-{job_id}.{step}.json"


@contextmanager
def runner_context(
    scheduler_file: str | os.PathLike[str] | None = None,
    interface: str | None = None,
    local_directory: str | os.PathLike[str] | None = None,
    worker_on_rank0: bool = True,
    timeout: float = 300.0,
    tls: bool = True,
) -> Iterator[Client]:
    """Run the Dask cluster across the tasks of an ``srun`` step; rank 0 gets a client.

    Use as ``with runner_context() as client: ...`` in a program started by
    ``srun``.  On rank 0 this starts the scheduler (listening on
    ``interface``, default all interfaces), writes its address to
    ``scheduler_file`` (default :func:`default_scheduler_file`; it must be on
    a path every node sees), starts one worker process unless
    ``worker_on_rank0`` is False, and yields a connected client; on leaving,
    it shuts the scheduler and all workers down and removes the file.  On
    every other rank it runs one Dask worker (named ``slurm-<rank>``, one
    thread) until the scheduler shuts down, then exits the process with
    status 0 -- the body of the ``with`` never runs there.

    A task that sees several GPUs (``CUDA_VISIBLE_DEVICES="0,1,2,3"``, as with
    ``srun --gpus-per-node=4``) gives its worker the one at index
    ``SLURM_LOCALID`` (mod the count); with ``--gpus-per-task=1`` SLURM has
    already done that.  ``timeout`` (seconds) bounds how long a worker waits
    for the scheduler file.  ``tls``: scheduler and workers talk TLS with a
    certificate made for this step; it travels to the other ranks inside the
    scheduler file, which only this user can read (mode 0600).
    """
    task = current_task()
    path = Path(scheduler_file) if scheduler_file is not None else default_scheduler_file(task.job_id)
    env = _worker_env(task)
    if task.rank != 0:
        _serve_worker(task, path, env, interface, local_directory, timeout)
        raise SystemExit(0)

    from distributed import Client, Nanny, Scheduler, SpecCluster
    from distributed.security import Security

    path.unlink(missing_ok=True)
    security = Security.temporary() if tls else Security()
    scheduler_options: dict[str, Any] = {
        "port": 0,
        "dashboard": False,
        "dashboard_address": ":0",
        "security": security,
        "protocol": "tls" if tls else "tcp",
    }
    # No host and no interface: listen on all interfaces, advertise the outward IP.
    if interface:
        scheduler_options["interface"] = interface
    worker_options: dict[str, Any] = {
        "nthreads": 1,
        "env": env,
        "interface": interface,
        "silence_logs": 40,
        "security": security,
    }
    if local_directory is not None:
        worker_options["local_directory"] = str(local_directory)
    workers = {"slurm-0": {"cls": Nanny, "options": worker_options}} if worker_on_rank0 else {}
    cluster = SpecCluster(
        workers=workers,
        scheduler={"cls": Scheduler, "options": scheduler_options},
        silence_logs=40,
        name=f"aihpc-slurm-{task.job_id}",
        security=security,
    )
    client = None
    try:
        info: dict[str, Any] = {"address": cluster.scheduler_address, "job_id": task.job_id}
        if tls:
            info["tls"] = security.get_tls_config_for_role("worker")  # CA, certificate and key (PEM)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        tmp.replace(path)  # atomic: a worker never reads half a file
        client = Client(cluster)
        yield client
    finally:
        try:
            if client is not None:
                # Workers first, then the scheduler: every rank's process ends.
                client.retire_workers(close_workers=True)
                client.shutdown()
        finally:
            cluster.close(timeout=30)
            path.unlink(missing_ok=True)


def _worker_env(task: SlurmTask) -> dict[str, str]:
    """Environment for this task's worker: one GPU of several, torch threads = CPUs per task."""
    env = {"OMP_NUM_THREADS": str(task.cpus_per_task)}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    devices = [d for d in visible.split(",") if d.strip()]
    if len(devices) > 1:
        env["CUDA_VISIBLE_DEVICES"] = devices[task.local_id % len(devices)]
    return env


def _serve_worker(
    task: SlurmTask,
    path: Path,
    env: dict[str, str],
    interface: str | None,
    local_directory: str | os.PathLike[str] | None,
    timeout: float,
) -> None:
    """Run one Dask worker (under a nanny) for this rank until the scheduler closes it."""
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise ConfigError(f"no scheduler file {path} after {timeout:.0f} s; is it on a shared path?")
        time.sleep(0.2)
    info = json.loads(path.read_text())
    address = info["address"]

    async def serve() -> None:
        from distributed import Nanny
        from distributed.security import Security

        tls = info.get("tls")
        security = (
            Security(tls_ca_file=tls["ca_file"], tls_worker_cert=tls["cert"], tls_worker_key=tls["key"],
                     require_encryption=True)
            if tls
            else Security()
        )

        nanny = await Nanny(
            address,
            name=f"slurm-{task.rank}",
            nthreads=1,
            interface=interface,
            env=env,
            local_directory=str(local_directory) if local_directory is not None else None,
            death_timeout=timeout,
            silence_logs=40,
            security=security,
        )
        await nanny.finished()  # the scheduler closed it (or it lost the scheduler)

    asyncio.run(serve())
