"""Each worker's memory limit, sized from its node, and the record of why a nanny killed its worker.

A Dask nanny restarts its worker as soon as the worker process's resident
memory passes :data:`TERMINATE_FRACTION` of the worker's limit.  Dask's own
default limit (``"auto"``) is the node's memory × the worker's threads / the
node's cores: an aihpc worker runs one Dask thread, so on a node of many
cores and few workers (every GPU node) it would get a small slice of a
memory nothing else uses.  aihpc's rule instead, for every launcher:

    **a worker's limit is its node's memory less the reserve
    (:func:`reserve`), divided among the workers on that node**,

unless ``--worker-memory`` gives it.  "The node's memory" is what Dask's
``distributed.system.MEMORY_LIMIT`` sees there: the physical memory, or a
cgroup's or rlimit's limit where one is lower.  Where it is computed:

* a cluster on this machine (:func:`aihpc.launch.executor.local_executor`):
  here, over the layout's workers;
* inside a SLURM allocation (:mod:`aihpc.launch.slurm`): by every task on its
  own node, over the step's tasks on that node (the job's memory there is
  what they share);
* batch jobs (:mod:`aihpc.launch.jobqueue`) and a scheduler's workers
  (``--scheduler``): by each worker's nanny on its node, before it starts its
  worker (:class:`NodeShare`): a batch job confined to memory of its own (a
  cgroup below the node's memory) holds one worker, else the node's memory
  is divided among the workers the run puts on it.  A scheduler's worker
  keeps a limit its ``dask worker --memory-limit`` gave it: only one started
  with Dask's default is given the node's share (its nanny restarts it once
  with it).

A limit below :data:`aihpc.base.config.MIN_WORKER_MEMORY` cannot hold a worker
at all and is refused before anything starts.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import NannyPlugin

from aihpc.base.config import MIN_WORKER_MEMORY
from aihpc.base.errors import ConfigError

if TYPE_CHECKING:
    from distributed import Nanny, Scheduler

_LOG = logging.getLogger("aihpc.launch.memory")

#: The share of a worker's limit past which its nanny restarts it (Dask's
#: ``distributed.worker.memory.terminate``, which aihpc leaves at its default).
TERMINATE_FRACTION = 0.95
#: The node's memory kept out of the workers' limits: for the operating system,
#: the nannies, and on the master's node the master, its scheduler and its
#: hyperparameter search processes.  The larger of the two.
RESERVE_FRACTION = 0.10
RESERVE_MIN = 2 * 2**30
#: The rule, as results.json's ``worker_memory`` states it.
RULE = (
    "a worker's limit is its node's memory less a reserve (the larger of "
    f"{100 * RESERVE_FRACTION:.0f} % and {RESERVE_MIN // 2**30} GiB) divided among the "
    "workers on that node, unless --worker-memory gives it; its nanny restarts it past "
    f"{100 * TERMINATE_FRACTION:.0f} % of it"
)


def reserve(node_bytes: int) -> int:
    """The bytes of a node's memory that no worker's limit includes."""
    return max(RESERVE_MIN, int(RESERVE_FRACTION * node_bytes))


def node_share(node_bytes: int, workers: int) -> int:
    """Each of ``workers`` workers' limit on a node of ``node_bytes``: the rest after the reserve,
    divided equally (0 where the reserve takes it all)."""
    return max(node_bytes - reserve(node_bytes), 0) // max(workers, 1)


def node_memory() -> tuple[int, bool]:
    """This node's memory as its processes may use it (Dask's reading: the physical memory, or a
    cgroup's or rlimit's limit where lower), and whether such a limit confines it."""
    import psutil
    from distributed.system import MEMORY_LIMIT

    return int(MEMORY_LIMIT), int(MEMORY_LIMIT) < psutil.virtual_memory().total


def checked_limit(limit: int, how: str) -> int:
    """``limit`` in bytes, if a worker can start in it; else ConfigError naming it and ``how`` it
    was reached."""
    from dask.utils import format_bytes

    if limit < MIN_WORKER_MEMORY:
        raise ConfigError(
            f"each worker's memory limit must be at least {format_bytes(MIN_WORKER_MEMORY)} "
            f"(a worker with torch loaded, before it trains), got {format_bytes(limit)} ({how})"
        )
    return limit


def worker_limit(memory: str | None, workers_on_node: int) -> int:
    """The limit of each of ``workers_on_node`` workers this node starts: ``memory`` (a size like
    ``"8GiB"``), or this node's share (:func:`node_share`); ConfigError if too small."""
    if memory is not None:
        from dask.utils import parse_bytes

        return checked_limit(int(parse_bytes(memory)), f"--worker-memory {memory}")
    node, _ = node_memory()
    return checked_limit(
        node_share(node, workers_on_node),
        f"this node's {node / 2**30:.1f} GiB less the reserve, over {workers_on_node} workers",
    )


def tasks_on_node(env: dict[str, str] | None = None) -> int:
    """The tasks of this SLURM step on this task's node (``SLURM_STEP_TASKS_PER_NODE``, else
    ``SLURM_TASKS_PER_NODE``: ``"2(x3),1"`` is 2 on each of the first three nodes and 1 on the
    fourth; ``SLURM_NODEID`` says which is this one); 1 where SLURM does not say."""
    env = dict(os.environ) if env is None else env
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or ""
    counts: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            return 1
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    node = env.get("SLURM_NODEID", "0")
    index = int(node) if node.isdigit() else 0
    return max(counts[index], 1) if index < len(counts) else 1


class NodeShare(NannyPlugin):
    """Sets a nanny's memory limit on its node, before the worker it starts (or restarts) next.

    Made by :meth:`for_batch_jobs` or :meth:`for_scheduler`.  A nanny whose
    worker is running when the plugin reaches it (a scheduler's) restarts it,
    once, where its limit changed.
    """

    name = "aihpc-node-share"

    def __init__(
        self, workers: dict[str, int], per_node: int, batch: bool, fixed: int | None = None
    ) -> None:
        self.workers = dict(workers)  # the workers on each host, by its address
        self.per_node = per_node  # on a host not in ``workers``
        self.batch = batch
        self.fixed = fixed
        self.restart = False

    @classmethod
    def for_batch_jobs(cls, per_node: int) -> NodeShare:
        """Batch jobs, ``per_node`` of them on each node: a job confined to memory of its own
        (a cgroup below the node's memory) holds its worker alone."""
        return cls({}, per_node, batch=True)

    @classmethod
    def for_scheduler(cls, workers: dict[str, int], fixed: int | None = None) -> NodeShare:
        """A scheduler's workers, ``workers`` on each host: each given ``fixed`` bytes, or, where
        None, those started with Dask's default limit for their threads given the node's share
        (a limit given to ``dask worker`` is the user's)."""
        return cls(workers, 1, batch=False, fixed=fixed)

    def setup(self, nanny: Nanny) -> None:
        limit = self.fixed or self._share(nanny)
        manager = nanny.memory_manager
        if limit is None or limit < MIN_WORKER_MEMORY or limit == manager.memory_limit:
            return  # the nanny keeps what it has
        manager.memory_limit = limit
        if nanny.process is not None:  # a running worker takes it when restarted, once
            nanny.process.worker_kwargs["memory_limit"] = limit  # what a restart starts it with
            self.restart = True

    def _share(self, nanny: Nanny) -> int | None:
        """``nanny``'s share of its node; None where it keeps a limit given to it."""
        from distributed.worker_memory import parse_memory_limit

        if not self.batch:
            default = parse_memory_limit("auto", nanny.nthreads, logger=_LOG)
            if nanny.memory_manager.memory_limit != default:
                return None
        node, confined = node_memory()
        alone = self.batch and confined
        return node_share(node, 1 if alone else self.workers.get(nanny.ip, self.per_node))


def this_worker_limit() -> int | None:
    """The memory limit of the Dask worker this runs in (None: none, or not in a worker)."""
    try:
        from distributed import get_worker

        limit = get_worker().memory_manager.memory_limit
    except (ImportError, ValueError):
        return None
    return int(limit) if limit else None


def worker_memory(device: str = "auto") -> dict[str, Any]:
    """Runs on a worker, beside its task: its host, its node's memory and its resident memory
    now: what it holds before a trial (the process and its libraries, the data it staged, and on
    a GPU the device's context and its matrix library, loaded first by a product in the training
    dtype, as the peak's measurement loads them).  Its limit is the scheduler's to say
    (:func:`scheduler_limits`)."""
    import psutil
    import torch

    from aihpc.machine.devices import resolve_device, training_dtype

    dev = resolve_device(device)
    if dev.type == "cuda":
        x = torch.ones(64, 64, device=dev, dtype=training_dtype(dev))
        float((x @ x).sum())  # read back: the product has run
    node, confined = node_memory()
    return {
        "host": socket.gethostname(),
        "node_bytes": node,
        "node_confined": confined,
        "rss_bytes": int(psutil.Process().memory_info().rss),
    }


def scheduler_limits(dask_scheduler: Scheduler) -> dict[str, int | None]:
    """Runs on the scheduler: each worker's memory limit (None: none), by worker name."""
    return {str(w.name): (w.memory_limit or None) for w in dask_scheduler.workers.values()}


#: How a lost epoch's reason begins where its worker's nanny killed it for memory.
MEMORY_KILL = "its nanny killed it for memory"
#: The topic under which a nanny logs, to its scheduler, the worker it restarted for memory
#: (``distributed.worker_memory.NannyMemoryManager``): the worker's address, pid and memory.
MEMORY_RESTART_TOPIC = "worker-restart-memory"


def memory_kill(
    events: list[tuple[float, dict[str, Any]]], address: str | None, limit: int | None
) -> str | None:
    """Why the worker at ``address`` died, if its nanny killed it for memory: the last such
    event of its nanny (``events``: the scheduler's, for :data:`MEMORY_RESTART_TOPIC`), its
    memory against ``limit``; None if its nanny logged none."""
    from dask.utils import format_bytes

    kills = [msg for _, msg in events if isinstance(msg, dict) and msg.get("worker") == address]
    if address is None or not kills:
        return None
    rss = int(kills[-1]["rss"])
    against = (
        f"its limit of {format_bytes(limit)} (restarted past {100 * TERMINATE_FRACTION:.0f} %, "
        f"{format_bytes(int(TERMINATE_FRACTION * limit))})"
        if limit
        else "its limit"
    )
    return f"{MEMORY_KILL}: {format_bytes(rss)} resident, against {against}"
