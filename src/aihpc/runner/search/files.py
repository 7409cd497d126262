"""The weight files of the master's running trials, from a trial's start to its end.

A running trial holds one file: its last committed weights, or, until its
first epoch is committed, its parent's, from which that epoch is made (a
finished parent's, *pinned* in the :class:`~aihpc.runner.search.parents.ParentPool`,
or a snapshot of a running leader's, :mod:`aihpc.runner.search.fork`).  Each
epoch's file supersedes the last, which is deleted; when the trial ends, its
file joins the pool of parents, or is deleted where the trial finished no
epoch.  Nothing else needs a superseded file: children start from finished
trials, whose last weights are never superseded, or from a snapshot.
"""

from __future__ import annotations

from pathlib import Path

from aihpc.records.messages import WeightsRef
from aihpc.runner.search import fork
from aihpc.runner.search.parents import ParentPool
from aihpc.runner.search.trials import LiveTrial


class TrialFiles:
    """The files the running trials hold, in ``weights_dir``, with the pool of ``parents``."""

    def __init__(self, weights_dir: str, parents: ParentPool) -> None:
        self.weights_dir = weights_dir
        self.parents = parents

    def start(self, trial: LiveTrial) -> None:
        """``trial`` starts (or goes on after a resume): a child whose first epoch is still to
        be made pins its parent."""
        if trial.needs_parent():
            self.parents.pin(trial.parent)

    def commit(self, trial: LiveTrial, weights: WeightsRef | None) -> None:
        """``trial`` continues from ``weights`` (None: its epoch wrote none); the file they
        supersede is deleted, and a child's first weights release its parent's pin and its
        snapshot."""
        needed_parent = trial.needs_parent()
        old, trial.weights = trial.weights, weights or trial.weights
        if old is not None and trial.weights != old:
            Path(self.weights_dir, old.name).unlink(missing_ok=True)
        if needed_parent and not trial.needs_parent():
            self._release_parent(trial)

    def finish(self, trial: LiveTrial) -> None:
        """``trial`` has ended: its parent is released, and its last weights become a parent's
        in the pool, or are deleted where no epoch of it finished (nothing can start from
        them)."""
        if trial.needs_parent():
            self._release_parent(trial)
        if trial.best_goodness is not None and trial.weights is not None:
            trained = trial.trained()
            self.parents.finished(
                trial.id, trial.best_goodness, trial.arch, trial.weights, trial.spec, trained
            )
        elif trial.weights is not None:
            Path(self.weights_dir, trial.weights.name).unlink(missing_ok=True)

    def _release_parent(self, trial: LiveTrial) -> None:
        """``trial`` no longer needs its parent's weights: its pin, and its snapshot, go."""
        self.parents.unpin(trial.parent)
        fork.release(self.weights_dir, trial)
