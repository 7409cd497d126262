"""Rank candidates for a task and pick the recommendation.

The recommendation is the candidate with the fewest training operations
per sample among those whose predicted accuracy is within ``margin``
(absolute, default :data:`MARGIN`) of the best prediction, counting only
candidates within ``budget_ops`` (training operations per sample), if given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from aihpc.errors import ConfigError
from aihpc.recommend.candidates import Candidate
from aihpc.recommend.complexity import Complexity
from aihpc.recommend.matcher import Matcher, features
from aihpc.recommend.scoring import CandidateScore, score_candidates, task_complexity
from aihpc.recommend.tasks import Task

#: Predicted accuracy a cheaper candidate may give up against the best (absolute).
MARGIN = 0.02


@dataclass(frozen=True)
class Ranked:
    """One candidate with its predicted accuracy (clipped to [0, 1]), the matcher's
    unclipped value that ranks it, and its rank (1 = best predicted)."""

    score: CandidateScore
    predicted: float
    raw: float
    rank: int
    within_budget: bool


@dataclass(frozen=True)
class Recommendation:
    """A task's complexity, its ranked candidates and the one recommended."""

    task: str
    complexity: Complexity
    ranked: tuple[Ranked, ...]
    choice: str
    margin: float
    budget_ops: float | None
    seconds: float

    def to_dict(self) -> dict:
        return {"task": self.task, "complexity": self.complexity.to_dict(), "choice": self.choice,
                "margin": self.margin, "budget_ops": self.budget_ops, "seconds": self.seconds,
                "candidates": [{**r.score.to_dict(), "predicted_accuracy": r.predicted,
                                "matcher_value": r.raw, "rank": r.rank,
                                "within_budget": r.within_budget} for r in self.ranked]}


def choose(scores: list[CandidateScore], predicted: np.ndarray, margin: float = MARGIN,
           budget_ops: float | None = None) -> int:
    """Index of the cheapest candidate within ``margin`` of the best prediction (within budget).

    ``predicted`` is accuracy, clipped to [0, 1] here: where the matcher
    extrapolates past 1 for several candidates, it cannot say that one will
    beat another, so the cheapest of them is chosen.
    """
    predicted = np.clip(predicted, 0.0, 1.0)
    ok = [i for i, s in enumerate(scores) if budget_ops is None or s.ops_per_sample <= budget_ops]
    if not ok:
        cheapest = min(s.ops_per_sample for s in scores)
        raise ConfigError(f"no candidate within --budget-ops {budget_ops:g}: the cheapest needs "
                          f"{cheapest:.4g} training operations per sample")
    best = max(predicted[i] for i in ok)
    near = [i for i in ok if predicted[i] >= best - margin]
    return min(near, key=lambda i: (scores[i].ops_per_sample, -predicted[i], i))


def rank(task: Task, candidates: list[Candidate], matcher: Matcher, *, margin: float = MARGIN,
         budget_ops: float | None = None, seed: int = 0) -> Recommendation:
    """Measure the task and the candidates, predict, rank, and choose; nothing is trained."""
    start = time.perf_counter()
    cx = task_complexity(task, seed)
    scores = score_candidates(task, candidates, seed)
    raw = matcher.raw(np.stack([features(cx, s) for s in scores]))
    predicted = np.clip(raw, 0.0, 1.0)
    pick = choose(scores, predicted, margin, budget_ops)
    order = sorted(range(len(scores)), key=lambda i: (-raw[i], scores[i].ops_per_sample, i))
    ranked = tuple(Ranked(scores[i], float(predicted[i]), float(raw[i]), r + 1,
                          budget_ops is None or scores[i].ops_per_sample <= budget_ops)
                   for r, i in enumerate(order))
    return Recommendation(task.name, cx, ranked, scores[pick].name, margin, budget_ops,
                          time.perf_counter() - start)
