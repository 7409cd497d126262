"""Workers as PBS or LSF batch jobs, through dask-jobqueue as for SLURM.

:func:`aihpc.runner.slurm.slurm_cluster` is the SLURM case (with its checks
against the controller); this module builds the same cluster — one Dask
worker per job, one Dask thread, ``cores_per_worker`` CPUs for torch, TLS
with a certificate made for the run, glibc's malloc settings kept — for PBS
(``qsub``) and LSF (``bsub``).  A GPU per worker is requested the usual way
of each system (PBS Pro ``ngpus``, LSF ``-gpu``); sites that differ add
their own directives.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from aihpc.errors import ConfigError

SUBMIT = {"pbs": "qsub", "lsf": "bsub"}

# Dask's nanny gives its workers MALLOC_TRIM_THRESHOLD_=65536 unless the
# variable is already set, which makes PyTorch on CPU 2.5x slower (see
# aihpc.runner.executor.WORKER_CONFIG).  Jobs set a 128 MiB trim threshold and
# a 32 MiB mmap threshold (the ceiling of glibc's dynamic one), so tensors stay
# in the heap: measured as fast as glibc's defaults (65 vs 66 GOPS per thread).
MALLOC_PROLOGUE = ["export MALLOC_TRIM_THRESHOLD_=134217728", "export MALLOC_MMAP_THRESHOLD_=33554432"]


def run_security(tls: bool, shared_temp_directory: str | os.PathLike[str] | None):
    """A TLS certificate and key made for this run (``Security.temporary()``), or None.

    dask-jobqueue writes the workers' copy into ``shared_temp_directory``,
    created readable by this user only.
    """
    if not tls:
        return None
    from distributed.security import Security

    if shared_temp_directory is not None:
        Path(shared_temp_directory).mkdir(mode=0o700, parents=True, exist_ok=True)
    return Security.temporary()


def make_batch_cluster(
    system: str,
    cores_per_worker: int,
    memory_per_worker: str,
    gpus_per_worker: int = 0,
    queue: str | None = None,
    walltime: str = "01:00:00",
    log_directory: str | os.PathLike[str] | None = None,
    tls: bool = True,
    shared_temp_directory: str | os.PathLike[str] | None = None,
):
    """The dask-jobqueue cluster for ``system`` ("pbs" or "lsf"), no job submitted yet."""
    if system not in SUBMIT:
        raise ConfigError(f"batch system must be one of {', '.join(SUBMIT)}, got {system!r}")
    if cores_per_worker < 1:
        raise ConfigError(f"cores per worker must be >= 1, got {cores_per_worker}")
    from dask_jobqueue import LSFCluster, PBSCluster

    security = run_security(tls, shared_temp_directory)
    common: dict[str, Any] = dict(
        cores=1,  # Dask threads per job: one trial at a time
        processes=1,
        memory=memory_per_worker,
        queue=queue,
        walltime=walltime,
        python=sys.executable,
        job_script_prologue=[f"export OMP_NUM_THREADS={cores_per_worker}", *MALLOC_PROLOGUE],
        log_directory=str(Path(log_directory).resolve()) if log_directory is not None else None,
        security=security,
        protocol="tls://" if security else None,
        shared_temp_directory=str(shared_temp_directory) if shared_temp_directory is not None else None,
        scheduler_options={"dashboard": False, "dashboard_address": ":0"},
        job_name="aihpc-worker",
        name=system,  # worker names: pbs-0, pbs-1, ...
    )
    if system == "pbs":
        spec = f"select=1:ncpus={cores_per_worker}" + (f":ngpus={gpus_per_worker}" if gpus_per_worker else "")
        return PBSCluster(resource_spec=spec, **common)
    extra = [f'-gpu "num={gpus_per_worker}"'] if gpus_per_worker else []
    return LSFCluster(ncpus=cores_per_worker, job_extra_directives=extra, use_stdin=True, **common)


def batch_cluster(system: str, workers: int, **options: Any):
    """:func:`make_batch_cluster`, then submit ``workers`` jobs (the submit command must exist)."""
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    if system in SUBMIT and shutil.which(SUBMIT[system]) is None:
        raise ConfigError(f"{system.upper()} needs '{SUBMIT[system]}' on PATH, and it is not there")
    cluster = make_batch_cluster(system, **options)
    cluster.scale(jobs=workers)
    return cluster
