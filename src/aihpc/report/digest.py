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

from aihpc.base.fmt import as_number
from aihpc.report.lineage import morph_kind
from aihpc.report.quality import quality_for
from aihpc.results.read import (
    iter_trials,
    laid_out_by_line,
    read_results_document,
    read_results_head,
)
from aihpc.scoring.quality import ReportQuality

LISTED = 200  # trials reported one by one; a run with more is reported from its digest
SHOWN = 100  # the best trials a digest keeps whole


def read_for_report(path: Path) -> dict[str, Any]:
    """The results at ``path`` for the report: the whole document for a run of at most LISTED
    trials; else its top-level fields, ``trials`` = the kept trials (see the module docstring),
    and ``digest`` (:class:`Digest`'s ``to_dict``)."""
    if not laid_out_by_line(path):  # an older file: parsed whole, once
        return _digested(read_results_document(path))
    head = read_results_head(path)
    digest = Digest(quality_for(head))
    for trial in iter_trials(path):
        digest.add(trial)
    if digest.count <= LISTED:
        return read_results_document(path)
    wanted = digest.ancestry()
    kept = {t["id"]: t for _, _, t in digest.best}
    kept.update({t["id"]: t for t in iter_trials(path, wanted - set(kept))})
    return {
        **head,
        "trials": sorted(kept.values(), key=lambda t: t["id"]),
        "digest": digest.to_dict(),
    }


def _digested(document: dict[str, Any]) -> dict[str, Any]:
    """A document read whole (an older layout), digested the same way when it is large."""
    trials = [t for t in document.get("trials") or [] if isinstance(t, dict)]
    if len(trials) <= LISTED:
        return document
    digest = Digest(quality_for(document))
    for trial in trials:
        digest.add(trial)
    wanted = digest.ancestry() | {t["id"] for _, _, t in digest.best}
    kept = [t for t in trials if t.get("id") in wanted]
    return {**document, "trials": kept, "digest": digest.to_dict()}


class Digest:
    """What the report needs of every trial, added one trial at a time; ``quality``: the run's
    (:func:`aihpc.report.quality.quality_for`), which ranks the trials kept whole."""

    def __init__(self, quality: ReportQuality) -> None:
        self.quality = quality
        self.count = 0
        self.status: Counter[str] = Counter()
        self.epochs: Counter[int] = Counter()
        self.phase_seconds: dict[str, float] = {}
        self.ops: list[float] = []
        self.params: list[float] = []
        self.ids: list[Any] = []
        self.parents: list[Any] = []
        self.values: list[float | None] = []
        self.kinds: list[str] = []
        self.best: list[tuple[float, int, dict[str, Any]]] = []  # (goodness, -n, trial): min-heap

    def add(self, trial: dict[str, Any]) -> None:
        self.count += 1
        self.status[str(trial.get("status"))] += 1
        epochs = trial.get("epochs")
        self.epochs[len(epochs) if isinstance(epochs, list) else 0] += 1
        for phase, seconds in (trial.get("phase_seconds") or {}).items():
            self.phase_seconds[phase] = self.phase_seconds.get(phase, 0.0) + (
                as_number(seconds) or 0.0
            )
        self.ops.append(as_number((trial.get("ops") or {}).get("total")) or 0.0)
        self.params.append(as_number(trial.get("num_params")) or 0.0)
        value = self.quality.value(trial)
        self.ids.append(trial.get("id"))
        self.parents.append(trial.get("parent"))
        self.values.append(value)
        self.kinds.append(morph_kind(trial.get("morph")))
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
        current, seen = max(self.best, key=lambda e: e[:2])[2].get("id"), set()
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
