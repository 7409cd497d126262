"""Children of a running leader: PBT's exploit of the lineage that is ahead, while it trains.

With ``RunConfig.fork_leader``, a worker that needs a new trial while the
best trial of the run is still training (its curve has not flattened, so
it is no parent yet) trains a copy of it: its architecture and its last
committed weights and optimizer state, at its place in its lineage and on
its schedule, with its hyperparameters perturbed (Population Based
Training's exploit and explore, Jaderberg et al. 2017).  Without it, such a
worker would start a lineage of its own from a finished parent that is
behind the leader (at the run's start, from the seed's initialisation), and
successive halving stops that lineage again and again at the rungs the
leader passed, while the leader alone gets trained.

The leader (:func:`leader`) is the running trial with the best validation
value, where it beats every finished trial; a fork keeps its architecture
(it grows when its own curve flattens, as every trial does), except a child
of a leader kept past its plateau (``RunConfig.keep_leader``,
:mod:`aihpc.runner.search.lifecycle`), which grows from it: such a leader
is a parent while it trains on.  A kept leader is forked (or grown) even
without ``fork_leader``.  The master asks these rules of :class:`Leadership`.

A fork's starting weights are a snapshot of the leader's last committed file
(:func:`snapshot`), because the leader's next epoch supersedes, and
deletes, that file: a hard link where the file system has them (no bytes
copied), else a copy.  The snapshot is the fork's until its first epoch is
committed, then deleted (:func:`release`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from aihpc.records.messages import WeightsRef
from aihpc.runner.search.lifecycle import Mechanisms, flattened
from aihpc.runner.search.trials import LiveTrial

if TYPE_CHECKING:
    from aihpc.runner.search.parents import ParentPool

PREFIX = "fork"  # a snapshot's file name starts with it; a worker's never does (train.weights)


def leader(running: Iterable[LiveTrial], best_finished: float | None) -> LiveTrial | None:
    """The running trial a new trial should fork: the one with the best goodness (higher is
    better; the earlier of equals) among those with committed weights, where it beats
    ``best_finished`` (the best goodness of a finished trial that can be a parent; None: none);
    else None."""
    ready = [t for t in running if t.weights is not None and t.best_goodness is not None]
    if not ready:
        return None
    best = max(ready, key=lambda t: (t.best_goodness, -t.id))
    assert best.best_goodness is not None
    if best_finished is not None and best.best_goodness <= best_finished:
        return None
    return best


class Leadership:
    """The run's leader, as the master asks about it: whether a new trial starts from it, whether
    it is kept, whether a new trial grows it.  ``running`` and ``parents`` are the master's own,
    read as they are when asked; ``slots`` is the executor's task slots, set at each fill."""

    def __init__(
        self,
        mechanisms: Mechanisms,
        resolution: float,
        running: Mapping[int, LiveTrial],
        parents: ParentPool,
    ) -> None:
        self.mechanisms = mechanisms
        self.resolution = resolution  # the quality's (a gain under it is no gain)
        self.running = running
        self.parents = parents
        self.slots = 0

    def leader(self) -> LiveTrial | None:
        """The run's leader (:func:`leader`) now."""
        return leader(self.running.values(), self.parents.best_goodness())

    def start(self) -> LiveTrial | None:
        """The running trial a new trial starts from: the leader, where the run forks it, or
        grows it (:meth:`grows`); else None."""
        ahead = self.leader()
        if ahead is None or self.mechanisms.fork_leader or self.grows(ahead):
            return ahead
        return None

    def kept(self, trial: LiveTrial) -> bool:
        """Whether ``trial`` is the run's leader, kept past its plateau and its epoch budget
        (``keep_leader``, :mod:`aihpc.runner.search.lifecycle`; only where another worker can
        grow it meanwhile)."""
        return self.keeps() and self.leader() is trial

    def keeps(self) -> bool:
        return self.mechanisms.keep_leader and self.slots >= 2

    def grows(self, ahead: LiveTrial) -> bool:
        """Whether the run's leader ``ahead`` is kept and its curve has flattened: a new trial
        grows it."""
        return self.keeps() and flattened(ahead.history, self.resolution)


def snapshot(weights_dir: str | Path, trial: LiveTrial, child: int) -> WeightsRef:
    """A file of ``trial``'s last committed weights that trial ``child`` owns (the module
    docstring): the same bytes, so the same digest."""
    assert trial.weights is not None, "only a trial with committed weights is forked"
    source = Path(weights_dir, trial.weights.name)
    name = f"{PREFIX}{child}-trial{trial.id}-epoch{trial.epochs_done}.pt"
    target = Path(weights_dir, name)
    target.unlink(missing_ok=True)  # a resumed run's snapshot of a child that never started
    try:
        os.link(source, target)
    except OSError:  # no hard links on this file system
        shutil.copyfile(source, target)
    return WeightsRef(name, trial.weights.digest)


def is_snapshot(ref: WeightsRef | None) -> bool:
    return ref is not None and ref.name.startswith(PREFIX)


def release(weights_dir: str | Path, trial: LiveTrial) -> None:
    """Delete the snapshot ``trial`` started from (nothing where it is no fork)."""
    ref = trial.recipe.parent_weights if trial.recipe is not None else None
    if is_snapshot(ref):
        assert ref is not None
        Path(weights_dir, ref.name).unlink(missing_ok=True)
