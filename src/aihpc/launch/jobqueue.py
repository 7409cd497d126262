"""Workers as batch jobs from a login node: SLURM, PBS or LSF through dask-jobqueue.

The master and the Dask scheduler run here; every worker is its own batch
job (one Dask worker per job, one Dask thread, ``cores_per_worker`` CPUs
booked for torch's threads, optionally ``gpus_per_worker`` GPUs: a trial's
data-parallel processes, one GPU each).  The three systems differ only in
how a job books CPUs and GPUs (here for G GPUs):

=======  ===============================  ============================
system   CPUs                             GPU
=======  ===============================  ============================
slurm    ``--cpus-per-task``              ``--gres=gpu:G``
pbs      ``select=1:ncpus=N``             ``:ngpus=G`` (PBS Pro)
lsf      ``-n N``                         ``-gpu "num=G"``
=======  ===============================  ============================

The worker jobs must reach the scheduler: by default it listens on all
interfaces and advertises this host's outward IP address, which is right on
one node and on most clusters; give ``interface`` (e.g. ``"ib0"``: workers
and scheduler use that interface) where it is not.  Scheduler and workers
talk TLS with a certificate made for the run unless ``tls`` is false; the
workers' copy of it is written to ``key_dir``, which the caller removes with
the run (:func:`run_security`).

Problems the user can fix (no submit command, an unknown partition, bad
sizes) raise :class:`aihpc.base.errors.ConfigError` before any job is submitted;
a SLURM controller that does not answer is a
:class:`aihpc.base.errors.RunFailure`.  (Workers inside a SLURM allocation:
:mod:`aihpc.launch.slurm`.)
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.config import MIN_WORKER_MEMORY
from aihpc.base.errors import ConfigError
from aihpc.base.fileio import atomic_write
from aihpc.launch.dask_settings import JOB_PROLOGUE
from aihpc.launch.memory import NodeShare
from aihpc.machine.cluster import check_interface, check_slurm

SUBMIT = {"slurm": "sbatch", "pbs": "qsub", "lsf": "bsub"}

# SLURM's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_WALLTIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")

if TYPE_CHECKING:  # for the types only: dask-jobqueue is imported when batch jobs are made
    from dask_jobqueue.core import JobQueueCluster
    from distributed.diagnostics.plugin import NannyPlugin
    from distributed.security import Security


def jobqueue_cluster(
    system: str,
    workers: int,
    cores_per_worker: int,
    memory_per_worker: str | None,
    gpus_per_worker: int = 0,
    workers_per_node: int = 1,
    queue: str | None = None,
    walltime: str = "01:00:00",
    extra_directives: Sequence[str] = (),
    interface: str | None = None,
    log_directory: str | os.PathLike[str] | None = None,
    tls: bool = True,
    key_dir: str | os.PathLike[str] | None = None,
) -> JobQueueCluster:
    """A dask-jobqueue cluster for ``system`` (slurm, pbs or lsf) with ``workers`` jobs submitted.

    ``workers = 0`` builds the cluster and submits nothing (to read its
    ``job_script()``); otherwise the submit command (and for SLURM the
    controller and ``queue``, the partition) are checked first.  Returns once
    the jobs are submitted; they may still be pending:
    ``Client(cluster).wait_for_workers(n)`` waits for them.  Close the
    cluster to cancel them.

    ``memory_per_worker`` is a Dask size string (e.g. ``"8GiB"``): what each
    job asks of the batch system and its worker's memory limit.  None: a job
    asks for no memory (the batch system's default for a job), and its
    worker's limit is set on its node, before the worker starts, by
    :class:`aihpc.launch.memory.NodeShare` (the node's memory less the
    reserve, over ``workers_per_node``; or the job's own memory less the
    reserve, where the batch system confines the job to it).
    ``walltime`` is the batch system's format;
    ``extra_directives`` are added to the job script (e.g. ``["--qos=short"]``
    for SLURM); ``log_directory`` receives each job's output;
    ``key_dir`` (seen by every node; needed with ``tls``) receives the
    workers' certificate and key, readable by this user only.
    """
    cluster = _new_cluster(
        system,
        workers,
        cores_per_worker,
        memory_per_worker,
        gpus_per_worker,
        workers_per_node,
        queue,
        walltime,
        extra_directives,
        interface,
        log_directory,
        tls,
        key_dir,
    )
    if memory_per_worker is None:
        _register_before_jobs(cluster, NodeShare.for_batch_jobs(workers_per_node))
    if workers:
        cluster.scale(jobs=workers)  # type: ignore[no-untyped-call]  # unannotated in distributed
    return cluster


def _new_cluster(
    system: str,
    workers: int,
    cores_per_worker: int,
    memory_per_worker: str | None,
    gpus_per_worker: int,
    workers_per_node: int,
    queue: str | None,
    walltime: str,
    extra_directives: Sequence[str],
    interface: str | None,
    log_directory: str | os.PathLike[str] | None,
    tls: bool,
    key_dir: str | os.PathLike[str] | None,
) -> JobQueueCluster:
    """:func:`jobqueue_cluster`'s cluster, its settings checked first, before any job is sent."""
    _check(
        system,
        workers,
        queue,
        cores_per_worker,
        memory_per_worker,
        gpus_per_worker,
        walltime,
        extra_directives,
        interface,
    )
    if tls and key_dir is None:
        raise ValueError("a batch cluster with TLS needs key_dir for its workers' key")
    security = run_security(tls, key_dir)
    cls, own = _system_options(system, cores_per_worker, gpus_per_worker, extra_directives)
    options = _job_options(cores_per_worker, log_directory)
    if memory_per_worker is None:
        options["job_script_prologue"].insert(0, NODE_SHARE_NOTE.format(workers_per_node))
    return cls(
        memory=memory_per_worker or f"{MIN_WORKER_MEMORY}B",  # NodeShare replaces the latter
        job_directives_skip=list(_MEMORY_DIRECTIVES) if memory_per_worker is None else [],
        queue=queue,
        walltime=walltime,
        security=security,
        protocol="tls://" if security else None,
        interface=interface,
        **options,
        name=system,  # worker names: slurm-0, pbs-1, ...
        **own,
    )


#: The job script's line where its worker's limit is set on its node (the worker command's
#: ``--memory-limit`` is then replaced before the worker starts).
NODE_SHARE_NOTE = (
    "# aihpc: this worker's memory limit is set on its node (aihpc.launch.memory.NodeShare): "
    "the node's memory less the reserve, over {} workers per node"
)
#: The directives by which SLURM and LSF jobs ask for memory, left out where a job asks for none.
_MEMORY_DIRECTIVES = ("--mem", "-M ")


def _register_before_jobs(cluster: JobQueueCluster, plugin: NannyPlugin) -> None:
    """Give the scheduler ``plugin`` for every nanny that joins (before any job is submitted)."""
    from distributed import Client

    with Client(cluster) as client:  # type: ignore[no-untyped-call]  # unannotated
        client.register_plugin(plugin)


def _system_options(
    system: str, cores: int, gpus: int, directives: Sequence[str]
) -> tuple[type[JobQueueCluster], dict[str, Any]]:
    """The cluster class of ``system``, and how its jobs book CPUs and ``gpus`` GPUs (see above)."""
    from dask_jobqueue import LSFCluster, PBSCluster, SLURMCluster

    if system == "slurm":
        gres = [f"--gres=gpu:{gpus}"] if gpus else []
        return SLURMCluster, {"job_cpu": cores, "job_extra_directives": [*directives, *gres]}
    if system == "pbs":
        spec = f"select=1:ncpus={cores}" + (f":ngpus={gpus}" if gpus else "")
        return PBSCluster, {"resource_spec": spec, "job_extra_directives": list(directives)}
    gpu = [f'-gpu "num={gpus}"'] if gpus else []
    return LSFCluster, {
        "ncpus": cores,
        "job_extra_directives": [*directives, *gpu],
        "use_stdin": True,
    }


#: The files of the run's TLS material its workers read (Security's fields): the certificate
#: authority (the scheduler and client read it too), the workers' certificate and key.
WORKER_FILES = {"tls_ca_file": "ca.pem", "tls_worker_cert": "cert.pem", "tls_worker_key": "key.pem"}


def run_security(tls: bool, key_dir: str | os.PathLike[str] | None) -> Security | None:
    """A TLS certificate and key made for this run (``Security.temporary()``), or None.

    With ``key_dir``, the workers' parts (:data:`WORKER_FILES`) are written
    there, in a directory only this user can open, each file readable by this
    user only, and the returned Security names the files: a batch job's
    worker reads them on its node, and the run removes the directory when it
    ends.  Given the parts in memory instead, dask-jobqueue would write its own
    temporary copies, deleted when its cluster object is collected: after the
    run had removed them, that printed a traceback on stderr.
    """
    if not tls:
        return None
    from distributed.security import Security

    security: Security = Security.temporary()  # type: ignore[no-untyped-call]  # unannotated
    if key_dir is not None:
        folder = Path(key_dir).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o700)  # whatever the umask, and an existing folder too
        for field, name in WORKER_FILES.items():
            path = folder / name
            atomic_write(path, getattr(security, field), mode=0o600)
            setattr(security, field, str(path))
    return security


def job_ids(cluster: JobQueueCluster) -> list[str]:
    """The batch job ids of the cluster's submitted worker jobs, in worker order (numeric sort)."""
    ids = [str(job.job_id) for job in cluster.workers.values() if getattr(job, "job_id", None)]
    return sorted(ids, key=lambda j: (len(j), j))


def _job_options(
    cores_per_worker: int, log_directory: str | os.PathLike[str] | None
) -> dict[str, Any]:
    """What every aihpc worker job is, whatever the batch system: one Dask thread running one
    trial at a time on ``cores_per_worker`` torch threads, this Python, its output where
    given."""
    return {
        "cores": 1,  # Dask threads per job: one trial at a time
        "processes": 1,
        "python": sys.executable,  # so this environment must be on a path every node sees
        "job_script_prologue": [f"export OMP_NUM_THREADS={cores_per_worker}", *JOB_PROLOGUE],
        "scheduler_options": {"dashboard": False, "dashboard_address": ":0"},
        "job_name": "aihpc-worker",
        "log_directory": str(Path(log_directory).resolve()) if log_directory is not None else None,
    }


def _check(
    system: str,
    workers: int,
    queue: str | None,
    cores: int,
    memory: str | None,
    gpus: int,
    walltime: str,
    directives: Sequence[str],
    interface: str | None,
) -> None:
    """ConfigError for any argument of :func:`jobqueue_cluster` that cannot work, and for a
    batch system that cannot take the jobs (nothing is started)."""
    from dask.utils import parse_bytes

    if workers < 0:
        raise ConfigError(f"workers must be >= 0, got {workers}")
    if system not in SUBMIT:
        raise ConfigError(f"batch system must be one of {', '.join(SUBMIT)}, got {system!r}")
    if cores < 1:
        raise ConfigError(f"cores per worker must be >= 1, got {cores}")
    if gpus < 0:
        raise ConfigError(f"GPUs per worker must be >= 0, got {gpus}")
    if memory is not None:
        try:
            size = parse_bytes(memory)
        except (ValueError, TypeError):
            raise ConfigError(
                f"memory per worker must be a size like '4GiB', got {memory!r}"
            ) from None
        if size < MIN_WORKER_MEMORY:
            raise ConfigError(
                f"memory per worker must be >= {MIN_WORKER_MEMORY // 2**20}MiB (a worker with "
                f"torch loaded, before it trains), got {memory!r}"
            )
    if system == "slurm" and not _WALLTIME.match(walltime):
        raise ConfigError(f"walltime must be SLURM's [D-]HH:MM:SS (or minutes), got {walltime!r}")
    for directive in directives:
        if not directive.strip() or "\n" in directive:
            raise ConfigError(
                f"extra batch directives are single options like '--qos=short', got {directive!r}"
            )
        if system == "slurm" and not directive.startswith("-"):
            raise ConfigError(
                f"extra SLURM directives are sbatch options like '--qos=short', got {directive!r}"
            )
    if interface:
        check_interface(interface)
    if workers and system == "slurm":
        check_slurm(queue)
    elif workers and shutil.which(SUBMIT[system]) is None:
        raise ConfigError(f"{system.upper()} needs '{SUBMIT[system]}' on PATH, and it is not there")
