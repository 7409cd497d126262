"""A run's results as the report reads them: :class:`ReportRun`, and a large run's digest.

:func:`read_for_report` reads results.json (every version :mod:`aihpc.results.read`
reads) into one :class:`ReportRun`: the run's sections, its trials by id, its task
(which names the quality every part of the report reads, ranks, writes and plots:
the task's :class:`~aihpc.tasks.quality.ReportQuality`) and its search lineage,
each derived once here for every renderer.

A one-hour run on thousands of accelerators has hundreds of thousands of
trials: a table row, a bar and a tree node for each would make a page no
one can read or render.  A run with more than :data:`LISTED` trials is
therefore reported from a :class:`Digest` made while its trials are read one at a
time (never all in memory): how the trials ended, the distributions of
their quality (accuracy or validation loss),
operations, epochs and parameters, the time by phase, and each trial's (id,
parent, quality) for the lineage plot.  The :data:`SHOWN` best
trials (most accurate, or of lowest loss) and the best trial's whole
ancestry are kept whole, for the tables.  A run of at most :data:`LISTED` trials is
reported in full.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aihpc.records.codec import Record, value_or_none
from aihpc.report.lineage import Lineage, build_lineage
from aihpc.results.model import RunHead
from aihpc.results.read import iter_trial_records, laid_out_by_line, read_results, read_run_head
from aihpc.results.trial import TrialRecord
from aihpc.tasks import recorded_task
from aihpc.tasks.base import Task
from aihpc.tasks.quality import ReportQuality

LISTED = 200  # trials reported one by one; a run with more is reported from its digest
SHOWN = 100  # the best trials a digest keeps whole


def read_for_report(path: Path) -> ReportRun:
    """The results at ``path`` for the report: every trial of a run of at most LISTED; else the
    kept trials (see the module docstring) and the digest of all.  Read and checked by
    :mod:`aihpc.results.read`."""
    if not laid_out_by_line(path):  # an older file: parsed whole, once
        results = read_results(path)
        head, trials = results.head(), list(results.trials)
    else:
        head, trials = read_run_head(path), []
    digest = Digest(recorded_task(head.config).report_quality)
    for trial in trials or iter_trial_records(path):
        digest.add(trial)
    if digest.count <= LISTED:
        return ReportRun.of(head, trials or iter_trial_records(path))
    wanted = digest.ancestry() | {t.id for _, _, t in digest.best}
    if trials:
        kept: Iterable[TrialRecord] = [t for t in trials if t.id in wanted]
    else:
        kept = iter_trial_records(path, wanted)
    return ReportRun.of(head, kept, digest)


@dataclass(frozen=True)
class ReportRun:
    """One run as the report renders it: its sections (``head``: every one but its trials), its
    trials by id (every one, or those a large run's ``digest`` kept whole), its task, and the
    search lineage of those trials."""

    head: RunHead[Any]
    trials: tuple[TrialRecord, ...]
    task: Task
    lineage: Lineage
    digest: Digest | None = None

    @classmethod
    def of(
        cls, head: RunHead[Any], trials: Iterable[TrialRecord], digest: Digest | None = None
    ) -> ReportRun:
        """The run of ``head`` and ``trials`` (in any order), its task the one its configuration
        names."""
        task = recorded_task(head.config)
        ordered = tuple(sorted(trials, key=lambda t: t.id))
        return cls(head, ordered, task, build_lineage(ordered, task.report_quality), digest)

    @property
    def quality(self) -> ReportQuality:
        """The run's quality: its task's (:attr:`aihpc.tasks.base.Task.report_quality`)."""
        return self.task.report_quality

    @property
    def trial_count(self) -> int:
        """Every trial of the run, listed or digested."""
        return self.digest.count if self.digest is not None else len(self.trials)

    def by_id(self) -> dict[int, TrialRecord]:
        """Its trials by id."""
        return {t.id: t for t in self.trials}

    def best_trial(self) -> TrialRecord | None:
        """The trial of the best value of the run's quality (the lowest id on ties; the end of
        the lineage's ancestry), or None."""
        ancestry = self.lineage.ancestry
        return self.by_id()[ancestry[-1]] if ancestry else None

    @property
    def data(self) -> Record | None:
        """Its data set as its task described it (None: not recorded)."""
        return value_or_none(self.head.data)


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
        if value is not None:
            entry = (self.quality.goodness(value), -self.count, trial)
            if len(self.best) < SHOWN:
                heapq.heappush(self.best, entry)
            elif entry[:2] > self.best[0][:2]:
                heapq.heapreplace(self.best, entry)

    def ancestry(self) -> set[int]:
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
