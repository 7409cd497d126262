"""Rank candidates for a task and pick the recommendation.

Inside the calibrated domain (:mod:`aihpc.recommend.domain`) the matcher
predicts each candidate's accuracy with an 80 % interval, and the pick is
**the cheapest candidate (fewest training operations per sample) that is
within ``margin`` of the best prediction at any task level**
(:meth:`~aihpc.recommend.matcher.Prediction.tie_band`): predictions that sit
together at chance or at 100 % are not ties, so a saturated prediction
never hands the choice to the price.  Without a margin the pick is the
best predicted.

The interval is not used to trade down: its ends follow the predicted
level of the whole task, the least certain part, and on a held-out task
whose level was predicted near chance while its networks reached 70 %,
the rule "lower end within the margin of the best" took the cheapest
network and gave up 65 points.

Outside the domain the matcher is not used: candidates are ranked by
**synflow** alone (:data:`FALLBACK`; Tanaka et al. 2020), and the pick is
the top one.  Of the five proxies and their vote, synflow ranked best on
the calibration observations (leave one family out: highest Kendall tau
and lowest worst-case regret on both candidate sets); ``aihpc recommend
validate`` judges it on its own.  Either way only candidates within
``budget_ops`` count, if given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from aihpc.base.errors import ConfigError
from aihpc.recommend.candidates import Candidate
from aihpc.recommend.domain import Outside, check, describe
from aihpc.recommend.matcher import Matcher, Prediction, features
from aihpc.recommend.scoring import CandidateScore, score_candidates, task_complexity
from aihpc.recommend.tasks import Task
from aihpc.records.kinds_recommend import ComplexityRecord, RankedRecord, RecommendData

#: Predicted accuracy a cheaper candidate may give up against the best (absolute).  Chosen on
#: the calibration observations, leave one family out: 0, 0.01 and 0.02 gave a median regret of
#: 1.9, 1.6 and 1.7 points and a worst one of 52.8, 19.0 and 19.0 on the matched set.
MARGIN = 0.01
#: The proxy that ranks outside the calibrated domain.
FALLBACK = "synflow"


@dataclass(frozen=True)
class Ranked:
    """One candidate: its prediction and interval (None outside the domain), its rank
    (1 = best), and whether it is within the budget."""

    score: CandidateScore
    predicted: float | None
    low: float | None
    high: float | None
    rank: int
    within_budget: bool

    def to_record(self) -> RankedRecord:
        interval = None if self.low is None or self.high is None else (self.low, self.high)
        return RankedRecord(
            **self.score.fields(),
            predicted_accuracy=self.predicted,
            interval=interval,
            rank=self.rank,
            within_budget=self.within_budget,
        )


@dataclass(frozen=True)
class Recommendation:
    """A task's complexity, its ranked candidates, the one recommended, and how."""

    task: str
    complexity: ComplexityRecord
    ranked: tuple[Ranked, ...]
    choice: str
    method: str  # "matcher" or FALLBACK
    outside: tuple[Outside, ...]
    margin: float
    budget_ops: float | None
    seconds: float

    @property
    def domain(self) -> str:
        return describe(list(self.outside))

    def to_record(self) -> RecommendData:
        """The ``data`` of the ``recommend`` result."""
        return RecommendData(
            task=self.task,
            complexity=self.complexity,
            choice=self.choice,
            method=self.method,
            domain=self.domain,
            in_domain=not self.outside,
            outside=tuple(o.to_record() for o in self.outside),
            margin=self.margin,
            budget_ops=self.budget_ops,
            seconds=self.seconds,
            candidates=tuple(r.to_record() for r in self.ranked),
        )


def in_budget(score: CandidateScore, budget_ops: float | None) -> bool:
    """Whether the candidate needs at most ``budget_ops`` training operations per sample (None:
    any)."""
    return budget_ops is None or score.ops_per_sample <= budget_ops


def _within_budget(scores: list[CandidateScore], budget_ops: float | None) -> list[int]:
    ok = [i for i, s in enumerate(scores) if in_budget(s, budget_ops)]
    if not ok:
        cheapest = min(s.ops_per_sample for s in scores)
        raise ConfigError(
            f"no candidate within --budget-ops {budget_ops:g}: the cheapest needs "
            f"{cheapest:.4g} training operations per sample"
        )
    return ok


def choose(
    scores: list[CandidateScore],
    prediction: Prediction,
    margin: float = MARGIN,
    budget_ops: float | None = None,
) -> int:
    """Index of the cheapest candidate within ``margin`` of the best prediction at any task
    level, among those within budget (see the module docstring)."""
    ok = _within_budget(scores, budget_ops)
    best = max(prediction.eta[i] for i in ok)
    near = [i for i in ok if prediction.eta[i] >= best - prediction.tie_band(margin)]
    return min(near, key=lambda i: (scores[i].ops_per_sample, -prediction.eta[i], i))


def proxy_values(scores: list[CandidateScore], proxy: str) -> np.ndarray:
    """One proxy of each candidate (larger = better; a failed one, NaN, becomes -inf: last)."""
    values: np.ndarray = np.nan_to_num(
        np.array([s.proxies[proxy] for s in scores], dtype=float), nan=-np.inf
    )
    return values


def choose_by_fallback(scores: list[CandidateScore], budget_ops: float | None = None) -> int:
    """Index of the candidate with the largest :data:`FALLBACK` proxy within budget (ties: the
    cheaper)."""
    values = proxy_values(scores, FALLBACK)
    return min(
        _within_budget(scores, budget_ops), key=lambda i: (-values[i], scores[i].ops_per_sample, i)
    )


@dataclass(frozen=True)
class Decision:
    """How a task's candidates are ordered (``values``, larger = better) and which is picked:
    by the matcher inside the domain (``prediction``), by :data:`FALLBACK` outside it
    (``outside`` says why)."""

    method: str  # "matcher" or FALLBACK
    outside: tuple[Outside, ...]
    prediction: Prediction | None
    values: np.ndarray
    pick: int

    def order(self, scores: list[CandidateScore]) -> list[int]:
        """Candidate indices, best first (ties: the cheaper)."""
        return sorted(
            range(len(scores)), key=lambda i: (-self.values[i], scores[i].ops_per_sample, i)
        )


def decide(
    cx: ComplexityRecord,
    scores: list[CandidateScore],
    matcher: Matcher,
    margin: float = MARGIN,
    budget_ops: float | None = None,
) -> Decision:
    """Check the domain, then predict and choose, or rank by the fallback proxy and choose."""
    rows = np.stack([features(cx, s) for s in scores])
    outside = tuple(check(matcher, rows, [s.name for s in scores]))
    if outside:
        return Decision(
            FALLBACK,
            outside,
            None,
            proxy_values(scores, FALLBACK),
            choose_by_fallback(scores, budget_ops),
        )
    pred = matcher.predict(rows, cx.num_classes)
    return Decision("matcher", outside, pred, pred.eta, choose(scores, pred, margin, budget_ops))


def rank(
    task: Task,
    candidates: list[Candidate],
    matcher: Matcher,
    *,
    margin: float = MARGIN,
    budget_ops: float | None = None,
    seed: int = 0,
) -> Recommendation:
    """Measure the task and the candidates, predict (or fall back), rank, and choose; nothing is
    trained."""
    start = time.perf_counter()
    cx = task_complexity(task, seed)
    scores = score_candidates(task, candidates, seed)
    d = decide(cx, scores, matcher, margin, budget_ops)
    p = d.prediction

    def at(field: str, i: int) -> float | None:
        return None if p is None else float(getattr(p, field)[i])

    ranked = tuple(
        Ranked(
            scores[i],
            at("accuracy", i),
            at("low", i),
            at("high", i),
            r + 1,
            in_budget(scores[i], budget_ops),
        )
        for r, i in enumerate(d.order(scores))
    )
    return Recommendation(
        task.name,
        cx,
        ranked,
        scores[d.pick].name,
        d.method,
        d.outside,
        margin,
        budget_ops,
        time.perf_counter() - start,
    )
