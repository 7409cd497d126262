"""How far a child grows: towards the size that is compute-optimal for the time left.

With ``RunConfig.grow_on_plateau``, a child is made from a parent whose
curve flattened (:mod:`aihpc.runner.search.lifecycle`), and grows towards the
largest network that one worker can still train well before the deadline:
the task's growth steps (:meth:`aihpc.tasks.base.Task.plan`) are applied one
after another while the child's :meth:`~aihpc.tasks.base.Task.min_train_ops`
stays within the operations one worker can still do (:func:`worker_room`:
the run's operations per second per worker so far, times the seconds left)
and ``max_params``, at least one step (:func:`grow`).  Where the parent is
already at or past that size, the child keeps its parent's architecture
(:func:`keeps_size`): a PBT exploit, the same weights with new
hyperparameters; only such a child may repeat an architecture.

Without it (or before any operation is counted, when the rate is not yet
known), a child is one growth step, and more only until its architecture
is new: as a search without the mechanism always grew.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable

from aihpc.base.errors import MorphError
from aihpc.tasks import Arch, DataInfo, Task

# growth steps of one child at most: each is drawn and counted in the master's time, and 8 widen
# or deepen a network several times over
MAX_STEPS = 8
CACHED = 4096  # architectures whose counts are kept (a run's parents and recent children)


class Sizes:
    """The counted sizes of architectures, each counted once while it is among the
    :data:`CACHED` most recently asked: its :meth:`~aihpc.tasks.base.Task.min_train_ops` and
    its training operations per sample (at a batch of one), each counted when first asked."""

    def __init__(self, task: Task, data: DataInfo) -> None:
        self.task, self.data = task, data
        self._min_ops: OrderedDict[str, float] = OrderedDict()
        self._per_sample: OrderedDict[str, float] = OrderedDict()

    def min_train_ops(self, spec: Arch) -> float:
        return _cached(self._min_ops, spec, lambda: self.task.min_train_ops(spec, self.data))

    def ops_per_sample(self, spec: Arch) -> float:
        return _cached(
            self._per_sample, spec, lambda: self.task.recount_per_sample(spec, 1, 0.0)[0]
        )


def _cached(cache: OrderedDict[str, float], spec: Arch, count: Callable[[], float]) -> float:
    """``spec``'s value in ``cache``, counted by ``count`` where it is not there; the least
    recently asked leaves past :data:`CACHED`."""
    key = spec.content_hash()
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = cache[key] = count()
    if len(cache) > CACHED:
        cache.popitem(last=False)
    return value


def worker_room(ops: float, elapsed: float, workers: int, left: float) -> float | None:
    """The operations one worker can still do in the ``left`` seconds to the deadline, at the run's
    rate so far (``ops`` in ``elapsed`` seconds of its clock, over ``workers``); None before any
    operation is counted."""
    if ops <= 0 or elapsed <= 0 or workers < 1:
        return None
    return ops / elapsed / workers * max(left, 0.0)


def keeps_size(sizes: Sizes, parent: Arch, room: float | None) -> bool:
    """Whether a child of ``parent`` keeps its architecture: the parent's ``min_train_ops`` is
    already at or past what one worker can still do (``room``; None: not known, it grows)."""
    return room is not None and sizes.min_train_ops(parent) >= room


def grow(
    task: Task,
    spec: Arch,
    rng: random.Random,
    max_params: int | None,
    fits: Callable[[Arch], bool],
    is_new: Callable[[Arch], bool],
) -> tuple[Arch, int, list[str]]:
    """Growth steps drawn from ``rng`` applied to ``spec`` while the next one ``fits``, at least
    one and at most :data:`MAX_STEPS`, and on until the architecture ``is_new``: (child, steps,
    each step's description).

    A worker replays the same steps on the parent's weights with the same
    ``rng`` (:class:`aihpc.records.messages.Morph`); a step drawn but not
    applied comes after them, so it does not change the replay.  MorphError
    where no new architecture is found within :data:`MAX_STEPS` steps.
    """
    steps: list[str] = []
    while True:
        if len(steps) == MAX_STEPS:
            if is_new(spec):
                return spec, len(steps), steps
            raise MorphError(f"{MAX_STEPS} growth steps gave no new architecture")
        try:
            grown, _, description = task.plan(spec, rng, max_params)
        except MorphError:
            if steps and is_new(spec):
                return spec, len(steps), steps  # max_params reached
            raise
        if steps and is_new(spec) and not fits(grown):
            return spec, len(steps), steps
        spec = grown
        steps.append(description)
