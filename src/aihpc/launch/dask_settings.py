"""The Dask settings of every cluster aihpc starts, in one place.

Local clusters (:mod:`aihpc.launch.executor`) and the nannies of a run
inside a SLURM allocation (:mod:`aihpc.launch.slurm`) take
:data:`WORKER_CONFIG` through ``dask.config``; batch jobs
(:mod:`aihpc.launch.jobqueue`) start their workers in a shell, so they get
the same settings as environment variables (:data:`JOB_PROLOGUE`).  Both
take the network interface their scheduler and workers use
(:func:`aihpc.machine.cluster.check_interface`).

Dask's watch on silent workers (``distributed.scheduler.worker-ttl``) and its
connection timeouts (``distributed.comm.timeouts``) are left as they are: a
worker whose node is gone or whose process hangs is dropped within seconds by
aihpc's own watch, a plugin on the scheduler (:mod:`aihpc.launch.heartbeats`
says why Dask's would take up to a minute).
"""

from __future__ import annotations

#: What every worker imports before it joins its scheduler (Dask's preload): torch and the code
#: its tasks and the master's questions run.  The master's questions (:mod:`aihpc.launch.remote`)
#: run on the worker's event loop, where its heartbeats come from; a worker that imported torch
#: there, on its first question, would be silent until the import ended, and a loaded node can
#: make that longer than the silence limit (:mod:`aihpc.launch.heartbeats`): the scheduler then
#: dropped it before the run had placed it on a device.
WORKER_PRELOAD = ("aihpc.train.worker",)

WORKER_CONFIG = {
    "distributed.worker.preload": list(WORKER_PRELOAD),
    # the master requeues a lost epoch itself, with a bounded number of attempts
    "distributed.scheduler.allowed-failures": 0,
    # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers to return
    # memory to the OS early; with PyTorch on CPU every tensor allocation then
    # goes back to the kernel, and training runs several times slower
    # (docs/measurements/2026-11-29-figures-from-code-comments.md).  Keep glibc's default.
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    # a worker streaming its data (aihpc.train.feed) starts DataLoader processes,
    # and a daemonic process may not have children
    "distributed.worker.daemon": False,
    # A worker runs one trial at a time, sent only where it fits in the worker's limit
    # (aihpc.train.memory).  Dask would pause a worker past 80 % of it: one whose memory stays
    # high after a large trial (the allocator keeps what it freed) would then idle, with the
    # next epoch queued for it until the run's deadline.
    "distributed.worker.memory.pause": False,
    # A worker process shares the run's stderr, where aihpc's errors are one line.  A worker whose
    # scheduler closes before it does (the run ending while a loaded machine is slow to stop it)
    # logs a traceback at ERROR, "Failed to communicate with scheduler during heartbeat"; what
    # fails in a task aihpc reports itself (aihpc.launch.remote).  The worker's own log then says
    # only what is critical (the nanny's "silence_logs" reaches the nanny's logger, not this one).
    "distributed.nanny.pre-spawn-environ.DASK_LOGGING": "{'distributed.worker': 'critical'}",
}

# Batch jobs: the nanny there would give its workers MALLOC_TRIM_THRESHOLD_=65536
# unless the variable is already set.  Jobs set a 128 MiB trim threshold and a
# 32 MiB mmap threshold (the ceiling of glibc's dynamic one), so tensors stay in
# the heap, as fast as glibc's defaults (the same page).  And
# the job's workers are not daemonic, nor paused for memory, and import the preload, as above.
JOB_PROLOGUE = [
    "export MALLOC_TRIM_THRESHOLD_=134217728",
    "export MALLOC_MMAP_THRESHOLD_=33554432",
    "export DASK_DISTRIBUTED__WORKER__DAEMON=False",
    "export DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE=False",
    f'export DASK_DISTRIBUTED__WORKER__PRELOAD="{list(WORKER_PRELOAD)}"',
]


def use_worker_config() -> None:
    """Apply :data:`WORKER_CONFIG` in this process, before it starts a scheduler or nannies."""
    import dask

    dask.config.set(WORKER_CONFIG)


# What the nannies of a cluster on this machine fork their workers from (where multiprocessing can
# fork from a server process; else Dask's default, "spawn", starts each afresh): a server process
# that has imported these once, so a worker starts, and restarts after its nanny killed it, without
# importing torch again: a restart takes a fraction of a second, not a fresh interpreter's seconds
# (docs/measurements/2026-11-29-figures-from-code-comments.md).  A worker's own environment (the
# nanny's ``env``: CUDA_VISIBLE_DEVICES on GPUs) is set in it before it uses torch, as before;
# neither the server nor these imports touch CUDA.  Local clusters only: a SLURM step's or a batch
# job's worker is started by a nanny on its own node, a fresh interpreter that imports
# WORKER_PRELOAD before it joins.  The server imports ``torch._dynamo`` too: a trial's operation
# count runs its network on meta tensors (:mod:`aihpc.counting`), whose first forward imports it,
# and each worker's first epoch would otherwise pay that import on the run's clock.  A SLURM
# step's or a batch job's worker still does: with ``torch._dynamo`` in WORKER_PRELOAD, SLURM runs
# of 1 GiB workers failed under the whole test suite, and what failed was not seen (stderr's last
# line was dask-jobqueue's temporary key file, deleted twice, which batch runs no longer have);
# the import also makes every worker hold more before its first trial.
FORKSERVER_PRELOAD = ("distributed", "torch", "torch._dynamo", *WORKER_PRELOAD)


def fork_local_workers() -> None:
    """Have this process's nannies fork their workers from a server process
    (:data:`FORKSERVER_PRELOAD`), where the platform has one."""
    import multiprocessing

    import dask

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    from distributed.utils import get_mp_context

    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    # Dask sets its own preload the first time it is asked for the context, never after: set
    # ours once it has (before the server starts, with the first worker).
    context = get_mp_context()  # type: ignore[no-untyped-call]
    context.set_forkserver_preload(list(FORKSERVER_PRELOAD))
