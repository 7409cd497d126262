"""Where epoch tasks run: Dask distributed workers.

By default a ``LocalCluster`` on this machine — one worker per GPU, or on a
CPU-only machine workers that split the cores — bound to the loopback
interface; or any running scheduler given by address (``--scheduler
tcp://HOST:PORT``), whose workers may be on other nodes.

Each worker runs one task at a time (one Dask thread); torch's own threads are
set by the task.  See :data:`WORKER_CONFIG` for the Dask settings we change
and why.  Dask's automatic retry of tasks whose worker died is turned
off (``allowed-failures = 0``) for clusters we start, so the master sees the
failure at once and requeues the epoch itself, with a bounded number of
attempts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aihpc.errors import ConfigError


# Dask settings for the clusters aihpc starts.
WORKER_CONFIG = {
    # the master requeues a lost epoch itself, with a bounded number of attempts
    "distributed.scheduler.allowed-failures": 0,
    # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers to return
    # memory to the OS early; with PyTorch on CPU every tensor allocation then
    # goes back to the kernel, and training runs 2.5x slower (measured: 26 vs
    # 65 GOPS for one worker thread).  Keep glibc's default.
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
}


@dataclass(frozen=True)
class Layout:
    """How many workers, with how many torch threads each, on which device kind."""

    workers: int
    threads: int
    device: str  # "cpu" or "cuda"


def local_layout(workers: int | None, threads: int | None, device: str) -> Layout:
    """One worker per GPU; on CPU, ``cores`` split into workers of ``threads`` each.

    The CPU default is one single-threaded worker per core on small machines
    (≤ 4 cores: the search's small networks use one thread best), and workers
    of 4 threads on bigger ones.
    """
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    use_gpu = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_gpu:
        if not torch.cuda.is_available():
            raise ConfigError("device is 'cuda' but no CUDA GPU is available, got device='cuda'")
        n = workers or torch.cuda.device_count()
        return Layout(n, threads or max(1, cores // n), "cuda")
    if workers is None:
        per = threads or (1 if cores <= 4 else 4)
        n = max(1, cores // per)
    else:
        n = workers
    return Layout(n, threads or max(1, cores // n), "cpu")


class DaskExecutor:
    """Submit tasks and wait for them; the master's only view of the workers."""

    def __init__(self, layout: Layout | None, scheduler: str | None = None) -> None:
        import dask
        from distributed import Client, LocalCluster

        self.cluster = None
        if scheduler:
            try:
                self.client = Client(scheduler, timeout="20s")
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"cannot connect to scheduler {scheduler}: {exc}") from None
        else:
            assert layout is not None
            dask.config.set(WORKER_CONFIG)
            self.cluster = LocalCluster(
                n_workers=layout.workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
                silence_logs=logging.ERROR,
                worker_class="distributed.Nanny",
            )
            self.client = Client(self.cluster)

    def slots(self) -> int:
        """Task slots of the workers alive now."""
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        return sum(int(w.get("nthreads", 1)) for w in workers.values())

    def worker_names(self) -> list[str]:
        return sorted(str(w.get("name")) for w in self.client.scheduler_info(n_workers=-1)["workers"].values())

    def submit(self, fn, task: Any, key: str):
        return self.client.submit(fn, task, key=key, pure=False)

    def wait(self, futures: Iterable[Any], timeout: float) -> set[Any]:
        from distributed import wait

        futures = list(futures)
        if not futures:
            return set()
        try:
            done, _ = wait(futures, timeout=timeout, return_when="FIRST_COMPLETED")
        except TimeoutError:
            return set()
        return set(done)

    def close(self) -> None:
        try:
            self.client.close(timeout=10)
        finally:
            if self.cluster is not None:
                self.cluster.close(timeout=10)
