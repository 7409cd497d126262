"""The finished trials a child may still be morphed from, and the weight files the run keeps.

A run on thousands of workers finishes hundreds of thousands of trials, and
each leaves a weight file (weights and optimizer state: 190 MB for the GPU
default).  The search can only ever use a few of them, so the master keeps:

* the trials the strategy may still choose as parents: the ``population``
  most recently finished (both strategies draw from this window, see
  :mod:`aihpc.nas.search`);
* the ``KEEP_BEST`` most accurate finished trials (the run's best models);
* the seed network (trial 0), the parent of last resort;
* every parent that a recipe still names: a child whose first epoch is not yet
  committed is made from its parent's weights, and so is the trial of a proxy
  screening that is still running (the master *pins* these parents);
* and, outside this pool, each running trial's last committed weights (the
  master deletes the file an epoch supersedes).

Every other finished trial's weight file is deleted as soon as it leaves
this set, and its architecture is dropped from memory: disk use is bounded by
``population + KEEP_BEST + 1`` finished trials plus one file per running trial
and per pinned parent, whatever the run's length.  A resumed run rebuilds the
same set from the store (in the order the trials finished) and deletes the
weight files nothing names.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.nas.search import Candidate
from aihpc.records.messages import WeightsRef
from aihpc.records.rows import SEED_TRIAL
from aihpc.records.trial import Hyperparameters
from aihpc.runner.search.lineage import Lineage

if TYPE_CHECKING:
    from aihpc.tasks import Arch

KEEP_BEST = 4  # the most accurate finished trials whose weights are kept to the end


@dataclass(frozen=True)
class Trained:
    """What a child takes from a finished parent besides its architecture and weights: its
    hyperparameters (``inherit_hparams``), its lineage as it leaves it (its own epochs counted,
    and the schedule's position it reached), and its last epoch's seconds, validation seconds
    and training operations per sample (the child's first epoch's expected duration,
    :mod:`aihpc.runner.search.lineage`; None: not measured)."""

    hparams: Hyperparameters
    lineage: Lineage
    epoch_seconds: float | None = None
    ops_per_sample: float | None = None
    reached: float = 0.0
    eval_seconds: float | None = None


@dataclass
class _Kept:
    """What the pool holds of one trial: its architecture (and spec, built when first needed),
    its last weights (None: the trial has none yet, or never wrote any) and what a child takes
    from it (None: the seed before it trained)."""

    arch: dict[str, Any]
    weights: WeightsRef | None
    spec: Arch | None = None
    trained: Trained | None = None


class ParentPool:
    """The finished trials that can still be parents (see the module docstring)."""

    def __init__(
        self,
        weights_dir: Path,
        population: int,
        parse: Callable[[dict[str, Any]], Arch],
        keep_best: int = KEEP_BEST,
    ) -> None:
        self.weights_dir = Path(weights_dir)
        self._parse = parse  # an architecture's dict -> its value (the run's task's)
        self.window: deque[Candidate] = deque(maxlen=population)  # oldest first
        self._best: list[tuple[float, int]] = []  # (accuracy, -trial id): a min-heap
        self._keep_best = keep_best
        self._kept: dict[int, _Kept] = {}
        self._pins: Counter[int] = Counter()
        self.deleted = 0  # weight files deleted so far

    # -- what the search reads -----------------------------------------------------------
    def arch(self, trial_id: int) -> dict[str, Any]:
        return self._kept[trial_id].arch

    def spec(self, trial_id: int) -> Arch:
        kept = self._kept[trial_id]
        if kept.spec is None:
            kept.spec = self._parse(kept.arch)
        return kept.spec

    def weights(self, trial_id: int) -> WeightsRef | None:
        return self._kept[trial_id].weights

    def trained(self, trial_id: int) -> Trained | None:
        """What a child of ``trial_id`` takes from it; None: it has not trained (the seed before
        it finished), so a child of it starts a lineage of its own."""
        return self._kept[trial_id].trained

    def best(self) -> list[int]:
        """The kept most accurate finished trials, best first."""
        return [-negated for _, negated in sorted(self._best, reverse=True)]

    def best_goodness(self) -> float | None:
        """The best goodness of a finished trial the pool keeps (None: none)."""
        return max(self._best)[0] if self._best else None

    def files(self) -> set[str]:
        """The names of the weight files the pool keeps."""
        return {k.weights.name for k in self._kept.values() if k.weights is not None}

    # -- what the master tells it ----------------------------------------------------------
    def add_seed(self, arch: dict[str, Any], spec: Arch | None = None) -> None:
        """The seed network (trial 0), kept for the whole run: before it finishes, its children
        start from its initial weights."""
        self._kept[SEED_TRIAL] = _Kept(arch, None, spec)

    def finished(
        self,
        trial_id: int,
        accuracy: float,
        arch: dict[str, Any],
        weights: WeightsRef,
        spec: Arch | None = None,
        trained: Trained | None = None,
    ) -> None:
        """A trial finished with ``weights`` and best ``accuracy`` (its quality's goodness: higher
        is better): it joins the window (and the best, if it is among them); trials that leave
        both are released."""
        self._kept[trial_id] = _Kept(arch, weights, spec, trained)
        leaving = [self.window[0].trial_id] if len(self.window) == self.window.maxlen else []
        self.window.append(Candidate(trial_id, accuracy))
        entry = (accuracy, -trial_id)  # ties: the earlier trial ranks higher
        if len(self._best) < self._keep_best:
            heapq.heappush(self._best, entry)
        elif entry > self._best[0]:
            leaving.append(-heapq.heapreplace(self._best, entry)[1])
        else:
            leaving.append(trial_id)  # in the window only
        for old in leaving:
            self._release(old)

    def pin(self, trial_id: int | None) -> None:
        """A recipe names ``trial_id``'s weights: keep them until :meth:`unpin` (None, a trial
        with no parent: nothing to keep)."""
        if trial_id is not None:
            self._pins[trial_id] += 1

    def unpin(self, trial_id: int | None) -> None:
        if trial_id is None:
            return
        self._pins[trial_id] -= 1
        if self._pins[trial_id] <= 0:
            del self._pins[trial_id]
            self._release(trial_id)

    def sweep(self, also_keep: set[str]) -> None:
        """Delete every weight file that neither the pool nor ``also_keep`` names (on resume: the
        files of trials released before the master died, and of epochs it never committed)."""
        keep = self.files() | also_keep
        for path in self.weights_dir.iterdir():
            if path.name not in keep:
                self._delete(path.name)

    # -- internals ---------------------------------------------------------------------------
    def _keeps(self, trial_id: int) -> bool:
        return (
            trial_id == SEED_TRIAL
            or trial_id in self._pins
            or any(c.trial_id == trial_id for c in self.window)
            or any(-negated == trial_id for _, negated in self._best)
        )

    def _release(self, trial_id: int) -> None:
        """Forget ``trial_id`` and delete its weight file, unless something still keeps it."""
        if trial_id not in self._kept or self._keeps(trial_id):
            return
        kept = self._kept.pop(trial_id)
        if kept.weights is not None:
            self._delete(kept.weights.name)

    def _delete(self, name: str) -> None:
        try:
            (self.weights_dir / name).unlink()
        except FileNotFoundError:
            return  # deleted before a resume
        self.deleted += 1
