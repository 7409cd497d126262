"""A worker that stops answering is dropped within seconds: aihpc's own watch on its heartbeats.

Every Dask worker sends its scheduler a heartbeat from its event loop, 0.5 s apart up to 10
workers, 1 s up to 49, 2 s up to 199, more beyond
(:func:`distributed.scheduler.heartbeat_interval`).  A worker process that dies on a node that
lives closes its connections, and the scheduler drops it at once.  A node that is gone (crashed,
powered off, cut from the network) closes nothing, nor does a process that hangs (stopped,
swapped out): its connections stay open, and only its heartbeats stopping say so.  Dask's own
watch on them, ``distributed.scheduler.worker-ttl`` (5 minutes by default, and never less than 10
heartbeats), asks a silent worker's nanny to restart it and drops the worker only once that
fails: on a node that is gone, once the connection to the nanny fails, as late as
``distributed.comm.timeouts.connect`` (30 s).  A connection to a node that is gone fails by
itself only after ``distributed.comm.timeouts.tcp`` (30 s; Dask allows no less than about 11).

:class:`SilentWorkers`, a scheduler plugin on every scheduler a run uses
(:meth:`aihpc.launch.executor.DaskExecutor.watch_heartbeats`), drops a worker at once when its
last heartbeat is :func:`silence_limit` seconds old: the task it was running fails with
``KilledWorker`` (aihpc sets ``allowed-failures`` to 0), and the master sends the epoch again;
its connections are closed, so that no question to it waits any longer.  Then it asks the
worker's nanny, where it still answers, to kill the worker: the nanny starts a new one, so a
hung process on a live node comes back as a fresh worker of the same name.  A worker whose
node lived but could not reach the scheduler for the whole limit (its network cut, then back)
finds its connection closed when the network returns, and Dask's worker then closes itself and
its nanny: it does not come back, and the run goes on without it.  A worker lost is
thus dropped between ``silence_limit - interval`` and ``silence_limit + CHECK_SECONDS`` seconds
after it went silent (``interval`` the heartbeat interval above: its last heartbeat came up to
one interval before).

The limit must never drop a worker that is only busy.  A worker trains on a thread of its own;
its heartbeats come from its event loop, which needs the GIL only briefly.  Python hands the GIL
over every 5 ms (``sys.getswitchinterval``) to a thread that waits for it, torch releases it in
its operations, and a worker's tasks are small messages (weights go through files), so a busy
worker's heartbeats come on time: only a single call that holds the GIL for the whole limit, or
a host that stops running the process that long, silences it.  The scheduler's own event loop
may be held up too (it shares the master's process): a check that runs more than
``LATE_SECONDS`` late drops nobody, since heartbeats may be waiting unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import WorkerState

logger = logging.getLogger(__name__)

#: A worker silent this long (seconds since its last heartbeat) is lost: 12 heartbeats of a
#: cluster of up to 10 workers, 6 of one of up to 49.
SILENCE_SECONDS = 6.0
#: ... and never fewer heartbeats than this (clusters past 49 workers heartbeat less often).
HEARTBEATS = 4
#: How often the scheduler looks at its workers' last heartbeats.
CHECK_SECONDS = 1.0
#: A check this late (seconds past when it was due) drops nobody: the scheduler itself was held up.
LATE_SECONDS = 1.0
#: How long the nanny of a dropped worker may take to kill it (it restarts it), in the background.
NANNY_SECONDS = 10.0
#: The scheduler's event topic of each worker dropped for its silence: its address, name, how long
#: it had been silent and the limit, in seconds.
SILENT_TOPIC = "aihpc-silent-worker"
#: The plugin's name on its scheduler.
PLUGIN_NAME = "aihpc-silent-workers"


def silence_limit(workers: int) -> float:
    """Seconds without a heartbeat after which a worker of a cluster of ``workers`` is lost:
    :data:`SILENCE_SECONDS`, or :data:`HEARTBEATS` heartbeat intervals where that is longer."""
    from distributed.scheduler import heartbeat_interval

    return max(SILENCE_SECONDS, HEARTBEATS * heartbeat_interval(workers))


class SilentWorkers(SchedulerPlugin):
    """Drops, on its scheduler, every worker whose last heartbeat is :func:`silence_limit`
    seconds old, and has its nanny restart it (the module docstring).

    Registered once per scheduler, under :data:`PLUGIN_NAME`; it stops watching once it is
    unregistered, or with its scheduler.
    """

    idempotent = True  # a second executor on the same scheduler keeps the plugin running
    name = PLUGIN_NAME

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.last_check = 0.0
        self.restarts: set[asyncio.Task[None]] = set()

    async def start(self, scheduler: Scheduler) -> None:
        from distributed.metrics import time
        from tornado.ioloop import PeriodicCallback

        self.scheduler = scheduler
        self.last_check = time()
        callback = PeriodicCallback(self.check, CHECK_SECONDS * 1000)
        scheduler.periodic_callbacks[PLUGIN_NAME] = callback  # stopped with the scheduler
        callback.start()

    async def close(self) -> None:
        for task in self.restarts:
            task.cancel()

    async def check(self) -> None:
        """Drop the workers silent past the limit, unless this check itself is late."""
        from distributed.metrics import time

        scheduler = self.scheduler
        assert scheduler is not None  # started
        if scheduler.plugins.get(PLUGIN_NAME) is not self:  # unregistered
            scheduler.periodic_callbacks.pop(PLUGIN_NAME).stop()
            return
        now = time()
        late = now - self.last_check > CHECK_SECONDS + LATE_SECONDS
        self.last_check = now
        if late:
            return
        limit = silence_limit(len(scheduler.workers))
        silent = [ws for ws in scheduler.workers.values() if now - ws.last_seen > limit]
        for ws in silent:
            await self.drop(ws, now - ws.last_seen, limit)

    async def drop(self, ws: WorkerState, silent: float, limit: float) -> None:
        """Remove ``ws`` from the scheduler now; have its nanny kill it (and so start a new one)
        in the background."""
        from distributed.metrics import time

        scheduler = self.scheduler
        assert scheduler is not None  # started
        logger.info("worker %s (%s) silent for %.1f s: dropped", ws.name, ws.address, silent)
        scheduler.log_event(
            SILENT_TOPIC,
            {"worker": ws.address, "name": str(ws.name), "silent": silent, "limit": limit},
        )
        nanny, stream = ws.nanny, scheduler.stream_comms.get(ws.address)
        # not told to close: a worker told so closes its nanny with it, and none would start again
        await scheduler.remove_worker(
            ws.address, stimulus_id=f"aihpc-silent-worker-{time()}", close=False
        )
        if stream is not None:  # its connection, which a node that is gone never closes
            stream.abort()  # type: ignore[no-untyped-call]  # BatchedSend.abort: unannotated
        if nanny:
            task = asyncio.ensure_future(self.have_nanny_restart(nanny))
            self.restarts.add(task)
            task.add_done_callback(self.restarts.discard)

    async def have_nanny_restart(self, nanny: str) -> None:
        """Have ``nanny`` kill its worker, which it then starts afresh; nothing if it does not
        answer within :data:`NANNY_SECONDS` (its node is gone)."""
        assert self.scheduler is not None  # started
        with contextlib.suppress(Exception):
            kill: Any = self.scheduler.rpc(nanny).kill(reason="aihpc-silent-worker")
            await asyncio.wait_for(kill, NANNY_SECONDS)


def silent_drops(events: list[tuple[float, dict[str, Any]]], address: str | None) -> list[float]:
    """How long the worker at ``address`` had been silent each time :class:`SilentWorkers`
    dropped it (``events``: the scheduler's, for :data:`SILENT_TOPIC`)."""
    return [
        float(msg["silent"])
        for _, msg in events
        if isinstance(msg, dict) and msg.get("worker") == address
    ]
