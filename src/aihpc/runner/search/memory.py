"""The master's view of its workers' memory: a trial is sent only where it fits, and a worker its
nanny killed is recorded as such.

Each worker's record (:func:`aihpc.launch.memory.worker_memory`, measured as
the search starts and as workers join) gives its limit and what it holds
before any trial.  A worker has room for a trial up to where its nanny
restarts it (:data:`aihpc.launch.memory.TERMINATE_FRACTION` of its limit),
less what it holds: its measured resident memory, the weight states it may
keep (:func:`aihpc.train.weights.cache_bytes`) and, on a resumed run that has
not staged yet, the data it will stage into its own memory.  A trial's need is
:func:`aihpc.train.memory.trial_memory`'s peak over its epochs (its first,
from its parent's weights or afresh, and a later one, from its own).  The
scheduler may send an epoch to any worker, so a trial is sent only where it
fits the worker with the least room.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aihpc.base.config import RunConfig
from aihpc.base.errors import ConfigError
from aihpc.launch.memory import TERMINATE_FRACTION
from aihpc.records.trial import Hyperparameters
from aihpc.runner.search.trials import LiveTrial
from aihpc.tasks import Arch, Task


@dataclass(frozen=True)
class Room:
    """One worker's room for a trial: its limit, where its nanny restarts it, what it holds."""

    worker: str
    limit: int
    held: int

    @property
    def usable(self) -> int:
        return int(TERMINATE_FRACTION * self.limit)

    @property
    def free(self) -> int:
        return self.usable - self.held


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


class MemoryWatch:
    """What the master knows of its workers' memory (the module docstring).

    ``killed``: why the worker lost with a task's exception died, if its
    nanny killed it for memory (None otherwise); ``staged``: bytes each
    worker will stage into its own memory and does not hold yet (a resumed
    run's, on the CPU).
    """

    def __init__(
        self,
        task: Task,
        config: RunConfig,
        device_kind: str,
        killed: Callable[[BaseException], str | None],
        staged: int = 0,
    ) -> None:
        self.task, self.config, self.device_kind = task, config, device_kind
        self.killed = killed
        self.staged = staged
        self.records: dict[str, dict[str, Any]] = {}  # each worker's, by name

    def add(self, records: list[dict[str, Any]]) -> None:
        """Workers measured (:func:`aihpc.launch.memory.worker_memory`); one measured again keeps
        its first record (what it held before any trial)."""
        for record in records:
            self.records.setdefault(record["worker"], record)

    def tightest(self) -> Room | None:
        """The worker with the least room for a trial (None: no worker has a limit)."""
        from aihpc.train.weights import cache_bytes

        rooms = [
            Room(name, limit, r["rss_bytes"] + cache_bytes(limit) + self.staged)
            for name, r in self.records.items()
            if (limit := r["limit_bytes"])
        ]
        return min(rooms, key=lambda room: room.free, default=None)

    def need(self, spec: Arch, hparams: Hyperparameters, start: Arch | None, epochs: int) -> int:
        """The host memory (bytes) of a trial of ``spec`` over ``epochs`` epochs (0: until the
        deadline), the first from the weights of ``start`` (None: afresh)."""
        from aihpc.train.memory import trial_memory

        procs = self.config.launch.procs_per_trial
        first = start.num_params() if start is not None else None
        peaks = [trial_memory(self.task, spec, hparams, self.device_kind, first, procs).peak]
        if epochs != 1:
            own = spec.num_params()
            peaks.append(trial_memory(self.task, spec, hparams, self.device_kind, own, procs).peak)
        return max(peaks)

    def kept_beyond_cache(self, spec: Arch, hparams: Hyperparameters, room: Room) -> int:
        """What a worker holds beyond its weight cache's bytes while it trains ``spec``: it
        always keeps the last state it wrote, whatever its size (:class:`aihpc.train.weights.
        StateCache`), and that of a trial of this size is as large as this one's own snapshot."""
        from aihpc.train.memory import trial_memory
        from aihpc.train.weights import cache_bytes

        procs = self.config.launch.procs_per_trial
        own = trial_memory(self.task, spec, hparams, self.device_kind, None, procs).snapshot
        return max(0, own - cache_bytes(room.limit))

    def refusal(self, trial: LiveTrial) -> str | None:
        """Why ``trial`` is not sent (one line naming its need and the room), or None: it fits."""
        room = self.tightest()
        if room is None:
            return None
        spec = trial.spec if trial.spec is not None else self.task.arch(trial.arch)
        start = None
        if trial.recipe is not None:
            start = self.task.arch(trial.recipe.parent_arch)
        try:
            need = self.need(spec, trial.hparams, start, trial.budget) + self.kept_beyond_cache(
                spec, trial.hparams, room
            )
        # an architecture the estimate cannot step through (an operation fake tensors lack) is
        # sent, as it would be without the estimate: the run does not end on it
        except Exception:
            return None
        return None if need <= room.free else refusal_line(need, room)

    def check_seed(self, data_info: dict[str, Any]) -> None:
        """ConfigError, before the search, if the task's seed network at the smallest batch size
        cannot fit the worker with the least room: no trial of the run could."""
        room = self.tightest()
        if room is None:
            return
        batch = min(self.config.search.batch_sizes or (1,))
        hparams = Hyperparameters(
            lr=1e-3, batch_size=batch, optimizer=self.config.search.optimizer or "sgd"
        )
        need = self.need(self.task.seed_arch(data_info), hparams, None, 1)
        if need > room.free:
            raise ConfigError(
                f"the seed network at batch size {batch} cannot be trained: "
                f"{refusal_line(need, room)}; give --worker-memory more, or fewer workers"
            )


def refusal_line(need: int, room: Room) -> str:
    """The one line of a trial that does not fit: its need, and the worker's limit and room."""
    return (
        f"not sent: it needs an estimated {gib(need)} of host memory; worker {room.worker} has "
        f"{gib(max(room.free, 0))} for it (its {gib(room.limit)} limit: "
        f"{gib(room.usable)} before its nanny restarts it, less {gib(room.held)} it holds)"
    )
