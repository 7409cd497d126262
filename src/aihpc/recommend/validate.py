"""``aihpc recommend validate``: judge the recommender on task families it was not fitted on.

Held-out tasks (:func:`aihpc.recommend.families.validation_tasks`, other
sizes, seeds and difficulties than calibration's) are observed: every
candidate of both sets is trained with the fixed step budget and several
seeds; its true accuracy is the mean over seeds.  For each family, the
matcher is **refitted on the calibration observations of the other
families only** (leave one family out) and judged on that family's
held-out tasks, exactly as ``aihpc recommend`` would use it: the domain
check first, synflow alone outside it.  Beside it, per task:

* ``most parameters`` and ``most operations`` (bigger is better);
* each zero-cost proxy alone, and ``proxies' vote`` (their mean rank);

and for each: Kendall's tau-b between the predictor and the true
accuracy, and the **regret** of its pick -- best true accuracy minus that
of the pick (the recommender picks as ``aihpc recommend`` does; every
other predictor its top candidate).  Tables give the mean tau and the
median and worst regret over tasks, per candidate set and per input shape.
``coverage`` is the fraction of true accuracies inside the refitted
matcher's 80 % intervals.  Seed agreement (tau between two seeds'
accuracies) says how stable the truth itself is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from aihpc.base.checks import is_integer
from aihpc.base.errors import DataError
from aihpc.recommend.calibrate import fit_observations
from aihpc.recommend.families import TaskSpec, validation_tasks
from aihpc.recommend.matcher import Matcher
from aihpc.recommend.proxies import PROXIES
from aihpc.recommend.ranking import FALLBACK, MARGIN, decide, proxy_values
from aihpc.recommend.scoring import CandidateScore
from aihpc.recommend.stats import kendall_tau, pair_signs
from aihpc.recommend.study import Observation, observations_of, observe_all, read_validation
from aihpc.recommend.tasks import STEPS
from aihpc.records.kinds_recommend import TaskScoreRecord, ValidationRecord

RECOMMENDER = "recommender"


def _tau(a: np.ndarray, b: np.ndarray) -> float:
    return float(kendall_tau(a, b))


def vote(scores: list[CandidateScore]) -> np.ndarray:
    """Mean rank (1 = best) of each candidate over the zero-cost proxies (larger proxy = better;
    ties share their average rank; a proxy that failed, NaN, ranks last)."""
    ranks = []
    for proxy in PROXIES:
        sign = pair_signs(proxy_values(scores, proxy))
        ranks.append(1 + (sign < 0).sum(1) + ((sign == 0).sum(1) - 1) / 2)
    mean_rank: np.ndarray = np.mean(ranks, axis=0)
    return mean_rank


def baselines(o: Observation) -> dict[str, tuple[np.ndarray, int]]:
    """Every baseline's values (larger = better) and its pick (the top; ties: the cheaper)."""
    scores = list(o.scores)
    ops = np.array([s.ops_per_sample for s in scores], float)
    values = {
        "most parameters": np.array([s.params for s in scores], float),
        "most operations": ops,
    }
    for proxy in PROXIES:
        values[f"{proxy} alone"] = proxy_values(scores, proxy)
    values["proxies' vote"] = -vote(scores)
    return {
        name: (v, min(range(len(v)), key=lambda i: (-v[i], ops[i], i)))
        for name, v in values.items()
    }


def _shape(o: Observation) -> str:
    return "x".join(map(str, o.input_shape))


def judge(
    held_out: list[Observation],
    matchers: dict[str, Matcher],
    *,
    margin: float = MARGIN,
    steps: int = STEPS,
) -> ValidationRecord:
    """Judge held-out observations; ``matchers[family]`` is the one fitted without that family."""
    scores: list[TaskScoreRecord] = []
    inside: dict[str, list[bool]] = {}
    outside: list[str] = []
    seed_tau: dict[str, list[float]] = {}
    for o in held_out:
        truth = o.accuracy.mean(axis=1)
        d = decide(o.complexity, list(o.scores), matchers[o.family], margin)
        entries = {RECOMMENDER: (d.values, d.pick), **baselines(o)}
        for name, (values, pick) in entries.items():
            scores.append(
                TaskScoreRecord(
                    candidate_set=o.candidate_set,
                    task=o.task,
                    family=o.family,
                    shape=_shape(o),
                    predictor=name,
                    tau=_tau(values, truth),
                    regret=float(truth.max() - truth[pick]),
                )
            )
        if d.prediction is None:
            outside.append(f"{o.candidate_set}/{o.task}")
        else:
            hit = (truth >= d.prediction.low - 1e-12) & (truth <= d.prediction.high + 1e-12)
            inside.setdefault(o.candidate_set, []).extend(hit.tolist())
        seeds = o.accuracy.shape[1]
        pairs = [
            _tau(o.accuracy[:, i], o.accuracy[:, j])
            for i in range(seeds)
            for j in range(i + 1, seeds)
        ]
        seed_tau.setdefault(o.candidate_set, []).extend(pairs)
    return ValidationRecord(
        scores=tuple(scores),
        coverage={k: float(np.mean(v)) for k, v in inside.items()},
        out_of_domain=tuple(outside),
        seed_tau={k: float(np.mean(v)) if v else float("nan") for k, v in seed_tau.items()},
        seeds=int(held_out[0].accuracy.shape[1]),
        steps=steps,
        margin=margin,
    )


def leave_one_family_out(
    calibration: list[Observation], families: set[str], provenance: dict[str, Any]
) -> dict[str, Matcher]:
    """For each family, the matcher fitted on the calibration observations of the others."""
    return {
        f: fit_observations(
            [o for o in calibration if o.family != f], {**provenance, "left_out": f}
        )
        for f in sorted(families)
    }


def validate(
    calibration: list[Observation],
    *,
    seeds: int = 2,
    steps: int = STEPS,
    base_seed: int = 100,
    specs: list[TaskSpec] | None = None,
    limit: int | None = None,
    margin: float = MARGIN,
    workers: int = 1,
    progress: Callable[[str], None] | None = None,
) -> tuple[ValidationRecord, list[Observation]]:
    """Observe both candidate sets on the held-out tasks and judge the left-one-family-out
    matchers."""
    specs = validation_tasks() if specs is None else specs
    held_out = observe_all(
        specs,
        seeds=seeds,
        steps=steps,
        base_seed=base_seed,
        limit=limit,
        workers=workers,
        progress=progress,
    )
    return rejudge(calibration, held_out, margin=margin, steps=steps), held_out


def rejudge(
    calibration: list[Observation],
    held_out: list[Observation],
    *,
    margin: float = MARGIN,
    steps: int = STEPS,
) -> ValidationRecord:
    """Judge saved held-out observations again (another calibration or margin): nothing is
    trained."""
    matchers = leave_one_family_out(calibration, {o.family for o in held_out}, {})
    return judge(held_out, matchers, margin=margin, steps=steps)


def rejudge_file(
    calibration: list[Observation], path: Path, *, margin: float = MARGIN
) -> tuple[ValidationRecord, list[Observation]]:
    """:func:`rejudge` on the held-out observations of a saved validation result, at the step
    count it was trained for."""
    data = read_validation(path)
    held_out = observations_of(data.observations, path)
    steps = data.validation.steps
    if not is_integer(steps, 1):
        raise DataError(f"{path}: validation.steps: expected >= 1, got {steps!r}")
    return rejudge(calibration, held_out, margin=margin, steps=steps), held_out


def summary(
    v: ValidationRecord, by: str = "candidate_set"
) -> list[tuple[str, str, float, float, float, int]]:
    """(group, predictor, mean tau, median regret, worst regret, tasks) per ``by`` value and
    predictor."""
    groups: dict[tuple[str, str], list[TaskScoreRecord]] = {}
    for s in v.scores:
        groups.setdefault(
            (getattr(s, by) if by != "set+shape" else f"{s.candidate_set} {s.shape}", s.predictor),
            [],
        ).append(s)
    return [
        (
            g,
            p,
            float(np.mean([s.tau for s in ss])),
            float(np.median([s.regret for s in ss])),
            float(np.max([s.regret for s in ss])),
            len(ss),
        )
        for (g, p), ss in groups.items()
    ]


def format_validation(v: ValidationRecord) -> str:
    """The validation tables: per candidate set, then the recommender and the baselines per input
    shape."""
    lines = [
        f"leave one family out: {v.seeds} seeds, {v.steps} steps, margin {v.margin:g}; regret in "
        f"accuracy points (best trained minus the pick)",
        "",
        f"{'set':<8} {'predictor':<18} {'tau':>6} {'regret median':>14} {'worst':>7} {'tasks':>6}",
    ]
    for g, p, tau, med, worst, n in summary(v):
        lines.append(f"{g:<8} {p:<18} {tau:>+6.2f} {100 * med:>14.1f} {100 * worst:>7.1f} {n:>6}")
    lines += [
        "",
        f"{'set and input':<18} {'predictor':<18} {'tau':>6} {'regret median':>14} {'worst':>7}",
    ]
    for g, p, tau, med, worst, _ in sorted(summary(v, "set+shape")):
        if p in (RECOMMENDER, "most parameters", f"{FALLBACK} alone"):
            lines.append(f"{g:<18} {p:<18} {tau:>+6.2f} {100 * med:>14.1f} {100 * worst:>7.1f}")
    cover = ", ".join(f"{k} {100 * c:.0f} %" for k, c in v.coverage.items())
    agree = ", ".join(f"{k} {t:+.2f}" for k, t in v.seed_tau.items())
    lines += [
        "",
        f"80 % intervals hold the truth: {cover}; seed-to-seed tau: {agree}",
        f"ranked by {FALLBACK} (outside the domain): {len(v.out_of_domain)} of "
        f"{len({(s.candidate_set, s.task) for s in v.scores})}"
        + (f" ({', '.join(v.out_of_domain)})" if v.out_of_domain else ""),
    ]
    return "\n".join(lines)
