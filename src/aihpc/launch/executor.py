"""Where epoch tasks run: Dask distributed workers.

By default a ``LocalCluster`` on this machine — one worker per GPU, or on a
CPU-only machine workers that split the cores — bound to the loopback
interface; or any running scheduler given by address (``--scheduler
tcp://HOST:PORT``), whose workers may be on other nodes.

Each worker runs one task at a time (one Dask thread); torch's own threads are
set by the task.  See :mod:`aihpc.launch.dask_settings` for the Dask settings we change
and why.  Dask's automatic retry of tasks whose worker died is turned
off (``allowed-failures = 0``) for clusters we start, so the master sees the
failure at once and requeues the epoch itself, with a bounded number of
attempts.  A worker that stops heartbeating (its node gone, its process hung)
is dropped within seconds by aihpc's own watch on its scheduler
(:mod:`aihpc.launch.heartbeats`), so its task fails the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aihpc.base.errors import ConfigError, WorkersLost
from aihpc.launch.dask_settings import fork_local_workers, use_worker_config

if TYPE_CHECKING:  # for the types only: Dask is imported when a run starts its workers
    from distributed import Client, Future, SpecCluster
    from distributed.diagnostics.plugin import WorkerPlugin

    from aihpc.base.config import LaunchSection
    from aihpc.launch.interface import F

T = TypeVar("T")
R = TypeVar("R")
# How long a lost task's worker's memory restart may take to reach the scheduler after the loss
# (the nanny sends it just before it kills the worker, on another connection).
KILL_EVENT_WAIT = 1.0


@dataclass(frozen=True)
class Layout:
    """How many workers, with how many torch threads each, on which device kind, with how many
    processes."""

    workers: int
    threads: int  # per process
    device: str  # "cpu" or "cuda"
    procs: int = 1  # processes (GPUs on GPU) per worker: a trial's data-parallel ranks


def local_layout(workers: int | None, threads: int | None, device: str, procs: int = 1) -> Layout:
    """One worker per GPU (per ``procs`` GPUs when trials are data-parallel);
    on CPU, ``cores`` split into workers of ``procs`` processes × ``threads``.

    The CPU default is one single-threaded process per core on small machines
    (≤ 4 cores: the search's small networks use one thread best), and 4
    threads each on bigger ones.
    """
    import torch

    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    use_gpu = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_gpu:
        if not torch.cuda.is_available():
            raise ConfigError("device is 'cuda' but no CUDA GPU is available, got device='cuda'")
        gpus = torch.cuda.device_count()
        if procs > gpus:
            raise ConfigError(
                f"gpus_per_trial must be <= the {gpus} GPUs of this machine, got {procs}"
            )
        n = workers or gpus // procs
        return Layout(n, threads or max(1, cores // (n * procs)), "cuda", procs)
    if workers is None:
        per = threads or (1 if cores <= 4 else 4)
        n = max(1, cores // (per * procs))
    else:
        n = workers
    return Layout(n, threads or max(1, cores // (n * procs)), "cpu", procs)


class DaskExecutor:
    """Submit tasks and wait for them; the master's only view of the workers.

    Built by :func:`local_executor`, :func:`remote_executor` or
    :func:`batch_executor`; owns the cluster it was given and closes it, then
    removes ``key_dir`` (a batch cluster's TLS files for its workers).  It
    is an :class:`aihpc.launch.interface.Executor`.
    """

    def __init__(
        self,
        client: Client,
        cluster: SpecCluster | None = None,
        owns_client: bool = True,
        key_dir: Path | None = None,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.owns_client = owns_client
        self.key_dir = key_dir
        # where a task's failure on a worker is logged (runner.remote)
        self.log_dir: Path | None = None
        self.watch_heartbeats()

    def watch_heartbeats(self) -> None:
        """Have the scheduler drop a worker silent for seconds, and its nanny restart it
        (:class:`aihpc.launch.heartbeats.SilentWorkers`; kept where it already runs)."""
        from aihpc.launch.heartbeats import SilentWorkers

        self.client.register_plugin(SilentWorkers())

    def alive(self) -> dict[str, int]:
        """The workers alive now, by address, with their threads: asked of the scheduler each time.

        Not ``Client.scheduler_info``: that returns the client's cached copy, which the client's
        own periodic refresh (asking for no workers) can overwrite between the answer and the
        return, so that a loaded machine can see no workers at all
        (docs/measurements/2026-11-29-figures-from-code-comments.md).
        """
        return dict(self.client.nthreads())  # type: ignore[no-untyped-call]  # unannotated

    def slots(self) -> int:
        """Task slots of the workers alive now."""
        return sum(self.alive().values())

    def wait_for_workers(self, n: int, timeout: float) -> None:
        try:
            self.client.wait_for_workers(n, timeout=timeout)
        except TimeoutError:
            raise WorkersLost(
                f"no {n} Dask worker(s) joined within {timeout:.0f} s (have {self.slots()})"
            ) from None

    def run_on_each(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """Run ``fn(*args)`` on every worker alive now, all at once; their results in worker order.

        Each worker runs one task at a time, so the calls run concurrently,
        as the run's epochs do (e.g. to measure the devices under full load).
        A call that raises is one line naming its worker, its traceback in
        ``log_dir`` (:mod:`aihpc.launch.remote`; the temporary folder if unset).
        """
        from aihpc.launch.remote import contained, gather

        workers = sorted(self.alive())
        futures = [
            self.client.submit(
                contained, fn, *args, workers=[w], allow_other_workers=False, pure=False
            )
            for w in workers
        ]
        return gather(self.client, futures, self.log_dir or Path(tempfile.gettempdir()))

    def ask_each(
        self, fn: Callable[..., Any], *args: Any, workers: Collection[str] | None = None
    ) -> dict[str, Any]:
        """``fn(*args)`` on every worker alive now (or those of ``workers``, by address), beside the
        task it runs (``Client.run``): the answers by worker name
        (:func:`aihpc.launch.remote.ask`)."""
        from aihpc.launch.remote import ask

        log_dir = self.log_dir or Path(tempfile.gettempdir())
        return ask(self.client, fn, args, log_dir, workers)

    def workers_per_host(self) -> dict[str, int]:
        """For each worker alive now (by address), how many workers share its host."""
        from collections import Counter

        from distributed.comm import get_address_host

        host = {address: get_address_host(address) for address in self.alive()}
        hosts = Counter(host.values())
        return {address: hosts[h] for address, h in host.items()}

    def hosts(self) -> dict[str, int]:
        """The hosts of the workers alive now (by address), with how many workers each has."""
        from collections import Counter

        from distributed.comm import get_address_host

        return dict(Counter(get_address_host(address) for address in self.alive()))

    def register_plugin(self, plugin: WorkerPlugin) -> None:
        """Install a Dask worker plugin on every worker, now and on any that joins or restarts
        later."""
        self.client.register_plugin(plugin)

    def memory_limits(self) -> dict[str, int | None]:
        """Each worker's memory limit in bytes (None: none), by worker name, as the scheduler
        has it."""
        from aihpc.launch.memory import scheduler_limits

        # Client.run_on_scheduler is unannotated
        limits: dict[str, int | None] = self.client.run_on_scheduler(  # type: ignore[no-untyped-call]
            scheduler_limits
        )
        return limits

    def memory_kill(self, exc: BaseException) -> str | None:
        """Why the worker of a task lost with ``exc`` (Dask's ``KilledWorker``, naming it) died,
        if its nanny killed it for memory (:func:`aihpc.launch.memory.memory_kill`, from the
        event the nanny sent its scheduler just before); None otherwise: at once for a worker
        dropped for its silence (:mod:`aihpc.launch.heartbeats`), else after waiting
        ``KILL_EVENT_WAIT`` seconds for such an event to arrive."""
        from aihpc.launch.heartbeats import SILENT_TOPIC, silent_drops
        from aihpc.launch.memory import MEMORY_RESTART_TOPIC, memory_kill

        last = getattr(exc, "last_worker", None)
        if last is None:
            return None
        if silent_drops(list(self.client.get_events(SILENT_TOPIC)), last.address):
            return None
        deadline = time.monotonic() + KILL_EVENT_WAIT
        while True:
            events = self.client.get_events(MEMORY_RESTART_TOPIC)
            why = memory_kill(list(events), last.address, getattr(last, "memory_limit", None))
            if why is not None or time.monotonic() >= deadline:
                return why
            time.sleep(0.1)

    def submit(self, fn: Callable[[T], R], task: T, key: str) -> Future[R]:
        return self.client.submit(fn, task, key=key, pure=False)

    def wait(self, futures: Collection[F], timeout: float) -> set[F]:
        from distributed import wait

        pending = list(futures)
        if not pending:  # nothing to wait for (no worker yet): wait the timeout, do not spin
            time.sleep(timeout)
            return set()
        try:
            # distributed.wait is unannotated; it returns (done, not_done) sets of the futures
            done, _ = wait(  # type: ignore[no-untyped-call]
                pending, timeout=timeout, return_when="FIRST_COMPLETED"
            )
        except TimeoutError:
            return set()
        return set(done)

    def close(self) -> None:
        if not self.owns_client:
            return
        if self.cluster is None:  # a scheduler started elsewhere: it goes on without aihpc's watch
            from aihpc.launch.heartbeats import PLUGIN_NAME

            with contextlib.suppress(Exception):
                self.client.unregister_scheduler_plugin(PLUGIN_NAME)
        try:
            self.client.close(timeout=10)  # type: ignore[no-untyped-call]  # Client.close: unannotated
        finally:
            try:
                if self.cluster is not None:
                    self.cluster.close(timeout=10)
            finally:
                if self.key_dir is not None:  # the run's key goes with its workers
                    shutil.rmtree(self.key_dir, ignore_errors=True)


def local_executor(layout: Layout, memory: str | None = None) -> DaskExecutor:
    """A cluster on this machine, bound to loopback, one process per worker.

    ``memory``: each worker's limit, a size like ``"8GiB"`` (Dask's nanny
    restarts a worker that goes past 95 % of it); default this machine's
    memory less the reserve, divided among the workers
    (:func:`aihpc.launch.memory.worker_limit`: ConfigError, before anything
    starts, for a limit no worker can start in).  On GPUs each worker is
    started with its own ``CUDA_VISIBLE_DEVICES`` (:func:`local_gpu_cluster`);
    on CPU a plain ``LocalCluster``.
    """
    from distributed import Client, LocalCluster

    from aihpc.launch.memory import worker_limit

    limit = worker_limit(memory, layout.workers)
    use_worker_config()
    fork_local_workers()
    if layout.device == "cuda":
        from aihpc.machine.devices import visible_gpus

        cluster = local_gpu_cluster(layout, visible_gpus(), limit)
    else:
        # LocalCluster.__init__ is unannotated
        cluster = LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=layout.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            # no dashboard, and the scheduler's HTTP server (metrics, health) on a free port: its
            # default, 8787, warns on stderr when another cluster on the machine holds it
            scheduler_kwargs={"dashboard_address": ":0"},
            silence_logs=logging.ERROR,
            worker_class="distributed.Nanny",
            memory_limit=limit,
        )
    return DaskExecutor(Client(cluster), cluster)  # type: ignore[no-untyped-call]  # Client.__init__: unannotated


def local_gpu_cluster(layout: Layout, gpus: list[str], limit: int) -> SpecCluster:
    """A ``SpecCluster`` of ``layout.workers`` nannies on loopback, named 0, 1, ..., as
    LocalCluster names them, worker i seeing GPUs ``gpus[i*P : i*P+P]`` (P = ``layout.procs``;
    :func:`aihpc.machine.devices.local_worker_envs`), each with a memory limit of ``limit``
    bytes."""
    from distributed import Nanny, Scheduler, SpecCluster

    from aihpc.machine.devices import local_worker_envs

    envs = local_worker_envs(layout.workers, layout.procs, gpus)
    options = {
        "nthreads": 1,
        "host": "127.0.0.1",
        "memory_limit": limit,
        "silence_logs": logging.ERROR,
    }
    workers = {
        i: {"cls": Nanny, "options": {**options, "name": i, "env": env}}
        for i, env in enumerate(envs)
    }
    scheduler = {
        "cls": Scheduler,
        "options": {"host": "127.0.0.1", "port": 0, "dashboard": False, "dashboard_address": ":0"},
    }
    return SpecCluster(  # type: ignore[no-untyped-call]  # SpecCluster.__init__: unannotated
        workers=workers, scheduler=scheduler, silence_logs=logging.ERROR, name="aihpc-local-gpus"
    )


def remote_executor(address: str, memory: str | None = None) -> DaskExecutor:
    """The workers of a running scheduler.  TLS (``tls://`` addresses) uses the
    certificates of Dask's configuration (``distributed.comm.tls.*``).

    Their memory limits are set through their nannies
    (:meth:`aihpc.launch.memory.NodeShare.for_scheduler`): ``memory`` (a size
    like ``"8GiB"``) for every worker; None: the node's share for a worker
    started with Dask's default limit, and a limit given to ``dask worker``
    kept.  A worker whose limit changes is restarted once with it.
    """
    from dask.utils import parse_bytes
    from distributed import Client

    from aihpc.launch.memory import NodeShare

    try:
        # Client.__init__ is unannotated
        executor = DaskExecutor(Client(address, timeout="20s"))  # type: ignore[no-untyped-call]
    except ValueError as exc:  # a malformed address
        raise ConfigError(f"cannot connect to scheduler {address}: {exc}") from None
    except (OSError, TimeoutError) as exc:
        raise WorkersLost(f"cannot connect to scheduler {address}: {exc}") from None
    per_host = executor.hosts()
    fixed = int(parse_bytes(memory)) if memory is not None else None
    executor.client.register_plugin(NodeShare.for_scheduler(per_host, fixed))
    return executor


def batch_executor(layout: Layout, launch: LaunchSection, run_dir: Path) -> DaskExecutor:
    """One batch job per worker (dask-jobqueue: SLURM, PBS or LSF), TLS unless ``tls = false``,
    the workers' key in ``run_dir/tls`` until the executor closes (at once where it cannot be
    made: the cluster closed too); each worker's memory ``--worker-memory``, else its share of
    its node (:func:`aihpc.launch.jobqueue.jobqueue_cluster`)."""
    from distributed import Client

    use_worker_config()
    from aihpc.launch.jobqueue import jobqueue_cluster

    assert launch.batch_system is not None  # a batch run's (choose_layout)
    key_dir = run_dir / "tls"
    cluster = None
    try:
        cluster = jobqueue_cluster(
            launch.batch_system,
            layout.workers,
            cores_per_worker=layout.threads * layout.procs,
            memory_per_worker=launch.worker_memory,
            workers_per_node=-(-layout.workers // max(launch.nodes, 1)),
            gpus_per_worker=layout.procs if launch.gpus_per_node else 0,  # a trial's GPUs
            queue=launch.partition,
            walltime=launch.walltime,
            interface=launch.interface,
            log_directory=run_dir / "batch-logs",
            tls=launch.tls is not False,
            key_dir=key_dir,
        )
        # Client.__init__: unannotated
        return DaskExecutor(Client(cluster), cluster, key_dir=key_dir)  # type: ignore[no-untyped-call]
    except BaseException:
        if cluster is not None:
            cluster.close(timeout=10)
        shutil.rmtree(key_dir, ignore_errors=True)
        raise


def allocation_layout(procs: int = 1) -> Layout:
    """Workers of a run inside a SLURM allocation: one per task, its CPUs as torch threads,
    ``procs`` processes."""
    import torch

    from aihpc.launch.slurm import current_task

    task = current_task()
    return Layout(
        task.ntasks, task.cpus_per_task, "cuda" if torch.cuda.is_available() else "cpu", procs
    )


def batch_layout(launch: LaunchSection) -> Layout:
    """Workers as batch jobs: one per ``procs_per_trial`` GPUs
    (``nodes × gpus_per_node / procs_per_trial``), or one per node on CPU."""
    gpus, procs = launch.gpus_per_node, launch.procs_per_trial
    if gpus and gpus % procs:
        raise ConfigError(
            f"gpus_per_node must be a multiple of gpus_per_trial ({procs}), got {gpus}"
        )
    workers = launch.workers or launch.nodes * max(gpus // procs, 1)
    return Layout(workers, launch.threads_per_worker or 1, "cuda" if gpus else "cpu", procs)
