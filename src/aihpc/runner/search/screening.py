"""Proxy screening in the search, the master's side (``screen = K``; off by default).

When a new child is due, the master morphs K different children of one
parent (chosen by the strategy, as for any child) and sends their
architectures to a worker in one :class:`~aihpc.records.messages.ScreenTask`;
:mod:`aihpc.recommend.screen` scores them untrained, with the zero-cost proxies
and the recommender's matcher.  When the scores come back, the candidate
with the highest predicted accuracy becomes the new trial; the others are
never trained (their architectures count as tried, so no later child
repeats them).

A screening occupies a worker slot like an epoch does, and its operations
count in the score like any other work.  Each is recorded in the store
(table ``screenings``, in the digest chain: every candidate's architecture,
morphs, prediction, proxies and operations, which one was chosen and the
trial it became) and in the MLPerf log (one ``aihpc_screening`` event).  A
screening that fails (its worker died, or scoring raised) is recorded with
its reason and no operations, and the first candidate is trained
unscreened; one that returns after the deadline starts no trial.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from aihpc.records.messages import ScreenResult, ScreenStatus, ScreenTask
from aihpc.records.rows import Candidate, ScreeningRow

if TYPE_CHECKING:
    from aihpc.launch.interface import TaskFuture

MLPERF_KEY = "aihpc_screening"


def screen_seed(run_seed: int, screen_id: int) -> int:
    """The initialisation and minibatch seed of a run's screening ``screen_id``."""
    return run_seed * 104729 + screen_id


def outcome(future: TaskFuture[ScreenResult], task: ScreenTask, now: float) -> ScreenResult:
    """The screening's result, or a failed one if its worker was lost."""
    try:
        return future.result()
    except Exception as exc:
        return ScreenResult(
            task.screen_id,
            ScreenStatus.FAILED,
            "lost",
            now,
            now,
            reason=f"{type(exc).__name__}: {exc}",
        )


def row(
    task: ScreenTask, result: ScreenResult, children: list[tuple[str, str]], trial: int | None
) -> ScreeningRow:
    """The store's record of one screening; ``children``: each candidate's (architecture hash,
    morphs)."""
    ok = result.status == ScreenStatus.OK
    candidates = tuple(
        Candidate(
            arch=arch,
            arch_hash=arch_hash,
            morph=how,
            ops=result.ops[i] if ok else 0,
            predicted=result.predicted[i] if ok else None,
            proxies={k: (v if math.isfinite(v) else None) for k, v in result.proxies[i].items()}
            if ok
            else None,
        )
        for i, (arch, (arch_hash, how)) in enumerate(zip(task.candidates, children, strict=True))
    )
    return ScreeningRow(
        id=task.screen_id,
        parent=task.parent,
        trial=trial,
        status=result.status,
        worker=result.worker,
        t_start=result.t_start,
        t_end=result.t_end,
        batch=result.batch,
        ops=sum(c.ops for c in candidates),
        chosen=result.chosen if trial is not None else None,
        candidates=candidates,
        reason=result.reason,
    )


def event(record: ScreeningRow) -> tuple[str, int, dict[str, Any]]:
    """The MLPerf log's event for a screening record: key, value (its operations), metadata."""
    return (
        MLPERF_KEY,
        record.ops,
        {
            "screening_id": record.id,
            "parent_trial": record.parent,
            "trial_id": record.trial,
            "candidates": len(record.candidates),
            "chosen": record.chosen,
            "status": str(record.status),
            "predicted": [c.predicted for c in record.candidates],
            "worker": record.worker,
        },
    )
