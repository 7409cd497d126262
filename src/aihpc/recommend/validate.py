"""``aihpc recommend validate``: judge the matcher on tasks held out from calibration.

For each candidate set, every candidate is trained on every held-out task
(:func:`aihpc.recommend.tasks.validation_tasks`) with the fixed step budget
and several seeds; its true accuracy is the mean over seeds.  For the
matcher, for each baseline ("most parameters", "most operations",
"random") and for each proxy alone, per task:

* Kendall's tau-b and Spearman's rho between the predictor and the true
  accuracy, averaged over tasks, with a 95 % percentile bootstrap interval
  (candidates resampled with replacement within each task, :data:`BOOT`
  resamples; "random": the interval of random orders);
* accuracy lost: best true accuracy minus that of the predictor's pick
  (the matcher picks as ``aihpc recommend`` does, the cheapest within the
  margin; a baseline its top candidate; random: the expected loss of a
  uniform pick), mean and worst over tasks.

Seed agreement, tau and rho between the accuracies of two seeds (all
pairs, averaged), says how stable the truth itself is: with few seeds it
caps what any predictor can reach.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from aihpc.recommend.matcher import Matcher, features
from aihpc.recommend.proxies import PROXIES
from aihpc.recommend.ranking import MARGIN, choose
from aihpc.recommend.study import SETS, Observation, observe
from aihpc.recommend.tasks import STEPS, Task, validation_tasks

BOOT = 1000


@dataclass(frozen=True)
class PredictorResult:
    """How well one predictor ranks a candidate set (see the module docstring)."""

    name: str
    tau: float
    tau_ci: tuple[float, float]
    rho: float
    rho_ci: tuple[float, float]
    lost: float
    lost_max: float


@dataclass(frozen=True)
class SetReport:
    """The validation of one candidate set."""

    candidate_set: str
    tasks: tuple[str, ...]
    candidates: int
    params_range: tuple[int, int]
    seeds: int
    steps: int
    seed_tau: float
    seed_rho: float
    predictors: tuple[PredictorResult, ...]

    def to_dict(self) -> dict:
        return asdict(self)


def kendall_spearman(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kendall's tau-b and Spearman's rho along the last axis (any leading batch axes).

    tau-b = sum_{i<j} s_a s_b / sqrt(sum s_a^2 * sum s_b^2) with s = sign of pair
    differences (Kendall 1945, ties corrected); rho = Pearson correlation of
    average ranks.  A side without any order (all ties) gives 0, not NaN.
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    sa = np.sign(a[..., :, None] - a[..., None, :])
    sb = np.sign(b[..., :, None] - b[..., None, :])
    den = np.sqrt((sa * sa).sum((-1, -2)) * (sb * sb).sum((-1, -2)))
    tau = np.divide((sa * sb).sum((-1, -2)), den, out=np.zeros(den.shape), where=den > 0)

    def ranks(s: np.ndarray) -> np.ndarray:  # average ranks from the sign matrix
        return (s > 0).sum(-1) + ((s == 0).sum(-1) + 1) / 2

    ra, rb = ranks(sa), ranks(sb)
    ra, rb = ra - ra.mean(-1, keepdims=True), rb - rb.mean(-1, keepdims=True)
    den = np.sqrt((ra * ra).sum(-1) * (rb * rb).sum(-1))
    rho = np.divide((ra * rb).sum(-1), den, out=np.zeros(den.shape), where=den > 1e-12)
    return tau, rho


def _corr(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    tau, rho = kendall_spearman(a, b)
    return float(tau), float(rho)


def _boot(preds: list[np.ndarray], truths: list[np.ndarray], idx: list[np.ndarray]) -> np.ndarray:
    """(BOOT, 2): mean over tasks of (tau, rho) for each resample; ``idx[k]`` (BOOT, n_k)."""
    per_task = [np.stack(kendall_spearman(p[i], t[i]), axis=-1) for p, t, i in zip(preds, truths, idx)]
    return np.mean(per_task, axis=0)


def _judge(name: str, preds: list[np.ndarray], truths: list[np.ndarray], picks: list[int] | None,
           rng: np.random.Generator) -> PredictorResult:
    tau, rho = np.mean([_corr(p, t) for p, t in zip(preds, truths)], axis=0)
    if picks is None:  # random: orders drawn at random, loss in expectation
        boots = np.mean([np.stack(kendall_spearman(rng.random((BOOT, len(t))),
                                                   np.broadcast_to(t, (BOOT, len(t)))), axis=-1)
                         for t in truths], axis=0)
        tau, rho = boots.mean(axis=0)
        lost = [float(t.max() - t.mean()) for t in truths]
    else:
        boots = _boot(preds, truths, [rng.integers(0, len(t), (BOOT, len(t))) for t in truths])
        lost = [float(t.max() - t[k]) for t, k in zip(truths, picks)]
    lo, hi = np.percentile(boots, [2.5, 97.5], axis=0)
    return PredictorResult(name, float(tau), (float(lo[0]), float(hi[0])), float(rho),
                           (float(lo[1]), float(hi[1])), float(np.mean(lost)), float(np.max(lost)))


def _seed_agreement(obs: list[Observation]) -> tuple[float, float]:
    pairs = [_corr(o.accuracy[:, i], o.accuracy[:, j]) for o in obs
             for i in range(o.accuracy.shape[1]) for j in range(i + 1, o.accuracy.shape[1])]
    return tuple(np.mean(pairs, axis=0)) if pairs else (float("nan"), float("nan"))  # type: ignore


def judge_set(obs: list[Observation], matcher: Matcher, *, margin: float = MARGIN,
              seed: int = 0, steps: int = STEPS) -> SetReport:
    """The :class:`SetReport` of one candidate set's observations on the held-out tasks."""
    rng = np.random.default_rng(seed)
    truths = [o.accuracy.mean(axis=1) for o in obs]
    raw = [matcher.raw(np.stack([features(o.complexity, s) for s in o.scores])) for o in obs]
    params = [np.array([s.params for s in o.scores], float) for o in obs]
    ops = [np.array([s.ops_per_sample for s in o.scores], float) for o in obs]
    results = [
        _judge("matcher", raw, truths, [choose(list(o.scores), r, margin) for o, r in zip(obs, raw)], rng),
        _judge("most parameters", params, truths, [int(np.argmax(p)) for p in params], rng),
        _judge("most operations", ops, truths, [int(np.argmax(p)) for p in ops], rng),
        _judge("random", raw, truths, None, rng)]
    for proxy in PROXIES:
        vals = [np.nan_to_num(np.array([s.proxies[proxy] for s in o.scores]), nan=-np.inf) for o in obs]
        results.append(_judge(f"{proxy} alone", vals, truths, [int(np.argmax(v)) for v in vals], rng))
    all_params = [s.params for o in obs for s in o.scores]
    st, sr = _seed_agreement(obs)
    return SetReport(obs[0].candidate_set, tuple(o.task for o in obs), len(obs[0].scores),
                     (min(all_params), max(all_params)), int(obs[0].accuracy.shape[1]), steps,
                     float(st), float(sr), tuple(results))


def validate(matcher: Matcher, *, seeds: int = 3, steps: int = STEPS, base_seed: int = 100,
             tasks: list[Task] | None = None, limit: int | None = None, margin: float = MARGIN,
             progress: Callable[[str], None] | None = None) -> tuple[list[SetReport], list[Observation]]:
    """Observe both candidate sets on the held-out tasks and judge the matcher on each."""
    tasks = validation_tasks() if tasks is None else tasks
    observations, reports = [], []
    for name in SETS:
        obs = [observe(t, name, seeds=seeds, steps=steps, base_seed=base_seed, limit=limit,
                       progress=progress) for t in tasks]
        observations += obs
        reports.append(judge_set(obs, matcher, margin=margin, seed=base_seed, steps=steps))
    return reports, observations


def rejudge(observations: list[Observation], matcher: Matcher, *, margin: float = MARGIN,
            seed: int = 100, steps: int = STEPS) -> list[SetReport]:
    """Judge saved observations again (another matcher or margin): nothing is trained."""
    sets = [s for s in SETS if any(o.candidate_set == s for o in observations)]
    return [judge_set([o for o in observations if o.candidate_set == s], matcher, margin=margin,
                      seed=seed, steps=steps) for s in sets]


def format_reports(reports: list[SetReport]) -> str:
    """The validation table, one block per candidate set."""
    lines = []
    for r in reports:
        lines.append(f"candidate set {r.candidate_set!r}: {r.candidates} candidates "
                     f"({r.params_range[0]:,}..{r.params_range[1]:,} parameters), "
                     f"{len(r.tasks)} held-out tasks ({', '.join(r.tasks)}), {r.seeds} seeds, "
                     f"{r.steps} steps")
        lines.append(f"  {'predictor':<18} {'Kendall tau [95% CI]':<24} {'Spearman rho [95% CI]':<24} "
                     f"{'acc lost mean/max':>18}")
        for p in r.predictors:
            lines.append(f"  {p.name:<18} {p.tau:+.2f} [{p.tau_ci[0]:+.2f}, {p.tau_ci[1]:+.2f}]"
                         f"{'':<6} {p.rho:+.2f} [{p.rho_ci[0]:+.2f}, {p.rho_ci[1]:+.2f}]{'':<6} "
                         f"{100 * p.lost:>7.1f} / {100 * p.lost_max:.1f} pt")
        lines.append(f"  seed-to-seed agreement (the cap): tau {r.seed_tau:+.2f}, rho {r.seed_rho:+.2f}")
    return "\n".join(lines)
