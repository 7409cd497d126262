"""A large run's results as the report reads them: aggregates of every trial, a few trials whole.

A one-hour run on thousands of accelerators has hundreds of thousands of
trials: a table row, a bar and a tree node for each would make a page no
one can read or render.  A run with more than :data:`LISTED` trials is
therefore reported from a digest made while its trials are read one at a
time (never all in memory): how the trials ended, the distributions of
their quality (accuracy or validation loss, :mod:`aihpc.report.quality`),
operations, epochs and parameters, the time by phase, and each trial's (id,
parent, quality, morphism) for the lineage plot.  The :data:`SHOWN` best
trials (most accurate, or of lowest loss) and the best trial's whole
ancestry are kept whole, for the tables.  A run of at most :data:`LISTED` trials is
reported in full, as before.
"""

from __future__ import annotations

import heapq
from collections import Counter
from pathlib import Path
from typing import Any

from aihpc.report.lineage import morph_kind
from aihpc.results.read import (
    CURRENT_VERSION,
    iter_trial_records,
    laid_out_by_line,
    read_results,
    read_run_head,
)
from aihpc.results.trial import TrialRecord
from aihpc.scoring.quality import ReportQuality
from aihpc.tasks import recorded_task

LISTED = 200  # trials reported one by one; a run with more is reported from its digest
SHOWN = 100  # the best trials a digest keeps whole


def read_for_report(path: Path) -> dict[str, Any]:
    """The results at ``path`` for the report, as the JSON objects it renders (upgraded to the
    current schema): the whole document for a run of at most LISTED trials; else its top-level
    fields, ``trials`` = the kept trials (see the module docstring), and ``digest``
    (:class:`Digest`'s ``to_dict``).  Read and checked by :mod:`aihpc.results.read`."""
    if not laid_out_by_line(path):  # an older file: parsed whole, once
        results = read_results(path)
        head, trials = results.head(), list(results.trials)
    else:
        head, trials = read_run_head(path), []
    digest = Digest(recorded_task(head.config).report_quality)
    for trial in trials or iter_trial_records(path):
        digest.add(trial)
    if digest.count <= LISTED:
        kept = trials or list(iter_trial_records(path))
        return _document(head.to_dict(), kept)
    wanted = digest.ancestry() | {t.id for _, _, t in digest.best}
    if trials:
        kept = [t for t in trials if t.id in wanted]
    else:
        kept = list(iter_trial_records(path, wanted))
    return {**_document(head.to_dict(), kept), "digest": digest.to_dict()}


def _document(head: dict[str, Any], trials: list[TrialRecord]) -> dict[str, Any]:
    """results.json's fields ``head`` with ``trials``, in the current schema."""
    return {**head, "schema_version": CURRENT_VERSION, "trials": [t.to_dict() for t in trials]}


class Digest:
    """What the report needs of every trial, added one trial at a time; ``quality``: the run's
    (its task's :attr:`~aihpc.tasks.base.Task.report_quality`), which ranks the trials kept
    whole."""

    def __init__(self, quality: ReportQuality) -> None:
        self.quality = quality
        self.count = 0
        self.status: Counter[str] = Counter()
        self.epochs: Counter[int] = Counter()
        self.phase_seconds: dict[str, float] = {}
        self.ops: list[float] = []
        self.params: list[float] = []
        self.ids: list[int] = []
        self.parents: list[int | None] = []
        self.values: list[float | None] = []
        self.kinds: list[str] = []
        self.best: list[tuple[float, int, TrialRecord]] = []  # (goodness, -n, trial): min-heap

    def add(self, trial: TrialRecord) -> None:
        self.count += 1
        self.status[str(trial.status)] += 1
        self.epochs[len(trial.epochs)] += 1
        for phase, seconds in trial.phase_seconds.items():
            self.phase_seconds[phase] = self.phase_seconds.get(phase, 0.0) + seconds
        self.ops.append(float(trial.ops.total))
        self.params.append(float(trial.num_params or 0))
        value = trial.best(self.quality.trial_key)
        self.ids.append(trial.id)
        self.parents.append(trial.parent)
        self.values.append(value)
        self.kinds.append(morph_kind(trial.morph))
        if value is not None:
            entry = (self.quality.goodness(value), -self.count, trial)
            if len(self.best) < SHOWN:
                heapq.heappush(self.best, entry)
            elif entry[:2] > self.best[0][:2]:
                heapq.heapreplace(self.best, entry)

    def ancestry(self) -> set[Any]:
        """The ids of the best trial (the first on ties) and of its ancestors."""
        if not self.best:
            return set()
        parent_of = dict(zip(self.ids, self.parents, strict=True))
        current: int | None = max(self.best, key=lambda e: e[:2])[2].id
        seen: set[int] = set()
        while current is not None and current not in seen:
            seen.add(current)
            current = parent_of.get(current)
        return seen

    def to_dict(self) -> dict[str, Any]:
        return {
            "trials": self.count,
            "status": dict(self.status),
            "epochs": dict(sorted(self.epochs.items())),
            "phase_seconds": self.phase_seconds,
            "ops": self.ops,
            "params": self.params,
            "quality": self.quality.name,
            "lineage": {
                "ids": self.ids,
                "parents": self.parents,
                "values": self.values,
                "kinds": self.kinds,
            },
        }
