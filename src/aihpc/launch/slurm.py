"""Dask workers inside a SLURM allocation: the tasks of one ``srun`` step are the workers.

(Workers as batch jobs submitted from a login node, for SLURM, PBS and LSF
alike: :mod:`aihpc.launch.jobqueue`.)

Under ``srun`` every task runs this same program (:func:`runner_context`);
rank 0 runs the scheduler and the body of the ``with`` block (the master),
every rank -- rank 0 too -- runs one Dask worker process.  The scheduler's
address goes through a JSON file on a path all nodes share.  dask-jobqueue's
``SLURMRunner`` spends rank 0 on the scheduler and rank 1 on the client,
which would leave two GPUs idle; this module does the same with rank 0 doing
both and hosting a worker as well.  Worker names end in the rank:
``slurm-<rank>``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.errors import ConfigError, WorkersLost
from aihpc.base.fileio import atomic_write, wait_for_file
from aihpc.launch.dask_settings import use_worker_config
from aihpc.machine.cluster import check_interface

if TYPE_CHECKING:  # pragma: no cover
    from distributed import Client, SpecCluster
    from distributed.security import Security


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
        raise ConfigError(
            "not inside a SLURM allocation: SLURM_JOB_ID is not set (use sbatch/salloc and srun)"
        )

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
    gpus_per_worker: int = 1,
    worker_memory: str | None = None,
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

    A task that sees more GPUs than ``gpus_per_worker``
    (``CUDA_VISIBLE_DEVICES="0,1,2,3"``, as with ``srun --gpus-per-node=4``)
    gives its worker ``gpus_per_worker`` of them, from index
    ``SLURM_LOCALID * gpus_per_worker`` (mod the count); with
    ``--gpus-per-task`` SLURM has already done that.  ``timeout`` (seconds)
    bounds how long a worker waits for the scheduler file.  ``tls``: TLS with
    a certificate made for this step, sent in the scheduler file (mode 0600).
    ``worker_memory``: each worker's memory limit, a size like ``"8GiB"``;
    default the allocation's memory on its node less the reserve, divided among
    the step's tasks there (:mod:`aihpc.launch.memory`; a limit no worker can
    start in is a ConfigError, on every rank, before anything starts).
    """
    from aihpc.launch.memory import tasks_on_node, worker_limit

    task, path, env = _task_setup(scheduler_file, interface, gpus_per_worker)
    limit = worker_limit(worker_memory, tasks_on_node())
    if task.rank != 0:
        _serve_worker(task, path, env, limit, interface, local_directory, timeout)
        raise SystemExit(0)

    with _rank0_client(
        task, path, env, limit, interface, local_directory, worker_on_rank0, tls
    ) as client:
        yield client


@contextmanager
def _rank0_client(
    task: SlurmTask,
    path: Path,
    env: dict[str, str],
    limit: int,
    interface: str | None,
    local_directory: str | os.PathLike[str] | None,
    worker_on_rank0: bool,
    tls: bool,
) -> Iterator[Client]:
    """Rank 0's part of :func:`runner_context`: the scheduler (and a worker), its file written,
    a client to it; on leaving, every worker and the scheduler shut down and the file removed."""
    from distributed import Client

    path.unlink(missing_ok=True)
    cluster, security = _rank0_cluster(
        task, env, limit, interface, local_directory, worker_on_rank0, tls
    )
    client = None
    try:
        _write_scheduler_file(
            path, cluster.scheduler_address, task.job_id, security if tls else None
        )
        client = Client(cluster)  # type: ignore[no-untyped-call]  # Client.__init__: unannotated
        yield client
    finally:
        try:
            if client is not None:
                # Workers first, then the scheduler: every rank's process ends.
                client.retire_workers(close_workers=True)
                client.shutdown()  # type: ignore[no-untyped-call]  # unannotated in distributed
        finally:
            cluster.close(timeout=30)
            path.unlink(missing_ok=True)


def _task_setup(
    scheduler_file: str | os.PathLike[str] | None, interface: str | None, gpus_per_worker: int
) -> tuple[SlurmTask, Path, dict[str, str]]:
    """This task: its SLURM facts, the scheduler file's path and its worker's environment; the
    Dask settings applied and ``interface`` checked on this task's node (each node needs it)."""
    use_worker_config()  # the nannies here start the workers: every aihpc cluster's settings
    if interface:
        check_interface(interface)
    task = current_task()
    path = (
        Path(scheduler_file) if scheduler_file is not None else default_scheduler_file(task.job_id)
    )
    return task, path, _worker_env(task, gpus_per_worker)


def _write_scheduler_file(path: Path, address: str, job_id: str, security: Security | None) -> None:
    """The file the other ranks' workers read: the scheduler's address and, with ``security``,
    the workers' TLS configuration (CA, certificate and key, PEM); readable by this user only."""
    info: dict[str, Any] = {"address": address, "job_id": job_id}
    if security is not None:
        # Security.get_tls_config_for_role is unannotated in distributed
        info["tls"] = security.get_tls_config_for_role("worker")  # type: ignore[no-untyped-call]
    atomic_write(path, json.dumps(info), mode=0o600)  # a worker never reads half a file


def _rank0_cluster(
    task: SlurmTask,
    env: dict[str, str],
    memory_limit: int,
    interface: str | None,
    local_directory: str | os.PathLike[str] | None,
    worker_on_rank0: bool,
    tls: bool,
) -> tuple[SpecCluster, Security]:
    """Rank 0's scheduler (and, unless ``worker_on_rank0`` is False, its worker, with a memory
    limit of ``memory_limit`` bytes).

    Returns (cluster, security).

    With ``tls``, scheduler and workers use a certificate made for this step.
    """
    from distributed import Nanny, Scheduler, SpecCluster
    from distributed.security import Security

    # Security and Security.temporary are unannotated in distributed
    security: Security = (
        Security.temporary() if tls else Security()  # type: ignore[no-untyped-call]
    )
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
        "memory_limit": memory_limit,
        "interface": interface,
        "silence_logs": 40,
        "security": security,
    }
    if local_directory is not None:
        worker_options["local_directory"] = str(local_directory)
    workers = {"slurm-0": {"cls": Nanny, "options": worker_options}} if worker_on_rank0 else {}
    cluster = SpecCluster(  # type: ignore[no-untyped-call]  # SpecCluster.__init__: unannotated
        workers=workers,
        scheduler={"cls": Scheduler, "options": scheduler_options},
        silence_logs=40,
        name=f"aihpc-slurm-{task.job_id}",
        security=security,
    )
    return cluster, security


def _worker_env(task: SlurmTask, gpus_per_worker: int = 1) -> dict[str, str]:
    """This task's worker's environment: ``gpus_per_worker`` GPUs, torch threads = CPUs per task."""
    env = {"OMP_NUM_THREADS": str(task.cpus_per_task)}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    devices = [d for d in visible.split(",") if d.strip()]
    if len(devices) > gpus_per_worker:
        first = task.local_id * gpus_per_worker
        env["CUDA_VISIBLE_DEVICES"] = ",".join(
            devices[(first + k) % len(devices)] for k in range(gpus_per_worker)
        )
    return env


def _serve_worker(
    task: SlurmTask,
    path: Path,
    env: dict[str, str],
    memory_limit: int,
    interface: str | None,
    local_directory: str | os.PathLike[str] | None,
    timeout: float,
) -> None:
    """Run one Dask worker (under a nanny, with a limit of ``memory_limit`` bytes) for this rank
    until the scheduler closes it."""
    import asyncio

    if not wait_for_file(path, timeout, poll=0.2):
        raise WorkersLost(
            f"no scheduler file {path} after {timeout:.0f} s; is it on a shared path?"
        )
    info = json.loads(path.read_text())
    address = info["address"]

    async def serve() -> None:
        from distributed import Nanny
        from distributed.security import Security

        tls = info.get("tls")
        # Security.__init__ is unannotated in distributed
        security = (
            Security(  # type: ignore[no-untyped-call]
                tls_ca_file=tls["ca_file"],
                tls_worker_cert=tls["cert"],
                tls_worker_key=tls["key"],
                require_encryption=True,
            )
            if tls
            else Security()  # type: ignore[no-untyped-call]
        )

        nanny = await Nanny(
            address,
            name=f"slurm-{task.rank}",
            nthreads=1,
            interface=interface,
            env=env,
            memory_limit=memory_limit,
            local_directory=str(local_directory) if local_directory is not None else None,
            death_timeout=timeout,
            silence_logs=40,
            security=security,
        )
        await nanny.finished()  # the scheduler closed it (or it lost the scheduler)

    asyncio.run(serve())
