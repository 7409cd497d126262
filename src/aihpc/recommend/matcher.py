"""The matcher: predicted accuracy, with an interval, from task complexity and candidate capability.

A regularised logistic model, fitted by ``aihpc recommend calibrate`` on
briefly trained candidates, maps one feature vector per (task, candidate)
to the validation accuracy reached in the fixed step budget.  Accuracy is
modelled between chance (``1 / classes``) and 1::

    accuracy = chance + (1 - chance) * sigmoid(eta),   eta = w . z + b

so no prediction can leave [chance, 1]: a task unlike the calibration
cannot push it past 100 %.  ``z`` are the features (:data:`FEATURES`),
standardised with the calibration's mean and standard deviation:

* task: ``probe_error``, ``n3``, ``n1``, ``log10(1 + F1)``, ``log10(T2)``,
  ``log10`` of the input dimension (C*H*W) and of the class count;
* candidate: ``log10`` of parameters, of training ops per sample and of
  ops per input value, of synflow, snip and grad_norm; jacob_cov as
  sign(v) log10(1 + |v|); NASWOT (already a log determinant) divided by
  the minibatch size;
* every candidate feature times ``probe_error``, so how much capability
  matters may depend on how hard the task is.

The fit (:func:`fit`) has two stages.  Within tasks, it maximises the
binomial likelihood of the fraction ``(accuracy - chance) / (1 - chance)``
over the candidate columns with an L2 penalty, plus one free level per
calibration task, so the candidate weights learn only how candidates differ
on one task.  Between tasks, a ridge regression predicts a task's level
from the task columns.  Both penalties are chosen from :data:`ALPHAS` by
leave-one-family-out cross-validation (Newton steps and closed forms, so
the calibration data fix the result exactly).

**Interval.**  The cross-validated predictions of every calibration row
(its family left out) give residuals on the logit scale, both sides
clipped to ``logit(EPS) .. logit(1 - EPS)``; their 10th and 90th
percentiles, added to a prediction's ``eta``, give its 80 % interval.

**Domain.**  The smallest and largest value of every feature in the
calibration rows; :mod:`aihpc.recommend.domain` checks a task against them.

The fitted model is JSON (:meth:`Matcher.to_dict`), shipped as
``aihpc/recommend/data/matcher.json`` with the command that made it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from aihpc.base.errors import DataError
from aihpc.recommend.scoring import PROXY_BATCH, CandidateScore
from aihpc.recommend.stats import kendall_tau
from aihpc.records.codec import exact
from aihpc.records.kinds_recommend import ComplexityRecord, MatcherRecord, ProvenanceRecord

FORMAT_VERSION = 2
TASK_FEATURES = ("probe_error", "n3", "n1", "log_f1", "log_t2", "log_dimension", "log_classes")
CANDIDATE_FEATURES = (
    "log_params",
    "log_ops",
    "log_ops_per_value",
    "log_synflow",
    "log_snip",
    "log_grad_norm",
    "jacob_cov",
    "naswot",
)
FEATURES = (
    TASK_FEATURES + CANDIDATE_FEATURES + tuple(f"{c}*probe_error" for c in CANDIDATE_FEATURES)
)
ALPHAS = (0.1, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0)
#: The penalty on the per-task intercepts of the within-task stage (small: they are free levels).
TASK_PENALTY = 1e-3
#: Fractions within this of 0 or 1 count as 0 or 1 on the logit scale (residuals, intervals).
EPS = 0.005
#: The interval's coverage: its ends are these percentiles of the cross-validated residuals.
INTERVAL = (10.0, 90.0)
SHIPPED = "matcher.json"


def _log(v: float) -> float:
    return math.log10(v) if math.isfinite(v) and v > 0 else -30.0


def features(task: ComplexityRecord, cand: CandidateScore) -> np.ndarray:
    """The feature vector of one (task, candidate) pair, in the order of :data:`FEATURES`."""
    p = cand.proxies
    jc = p["jacob_cov"] if math.isfinite(p["jacob_cov"]) else 0.0
    nw = p["naswot"] / PROXY_BATCH if math.isfinite(p["naswot"]) else 0.0
    t = [
        task.probe_error,
        task.n3,
        task.n1,
        math.log10(1 + task.f1),
        math.log10(task.t2),
        math.log10(task.dimension),
        math.log10(task.num_classes),
    ]
    c = [
        _log(cand.params),
        _log(cand.ops_per_sample),
        _log(cand.ops_per_sample / task.dimension),
        _log(p["synflow"]),
        _log(p["snip"]),
        _log(p["grad_norm"]),
        math.copysign(math.log10(1 + abs(jc)), jc),
        nw,
    ]
    return np.asarray(t + c + [v * task.probe_error for v in c], dtype=np.float64)


def _sigmoid(eta: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * eta))


def modelled_accuracy(eta: np.ndarray, chance: float | np.ndarray) -> np.ndarray:
    """The modelled accuracy: ``chance + (1 - chance) * sigmoid(eta)``."""
    accuracy: np.ndarray = chance + (1 - chance) * _sigmoid(eta)
    return accuracy


def logit(y: np.ndarray) -> np.ndarray:
    """The logit of fractions, clipped to [EPS, 1 - EPS] first."""
    y = np.clip(y, EPS, 1 - EPS)
    logits: np.ndarray = np.log(y / (1 - y))
    return logits


@dataclass(frozen=True)
class Prediction:
    """Predicted accuracies (n,) with the ends of their intervals, the linear predictor ``eta``
    that orders them, and chance (``1 / classes``)."""

    accuracy: np.ndarray
    low: np.ndarray
    high: np.ndarray
    eta: np.ndarray
    chance: float

    def tie_band(self, margin: float) -> float:
        """The ``eta`` gap within which a candidate is within ``margin`` accuracy of another
        at any task level.

        ``d accuracy / d eta`` is at most ``(1 - chance) / 4``, so a gap of at
        most ``4 margin / (1 - chance)`` is an accuracy gap of at most
        ``margin`` wherever the task's level lies: the test does not depend
        on the level, the least certain part of a prediction.
        """
        return 4 * margin / (1 - self.chance)


@dataclass(frozen=True)
class Matcher:
    """A fitted model; ``provenance`` records how it was made."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    alpha: tuple[float, float]  # the within-task and between-task penalties
    residuals: tuple[float, float]  # the INTERVAL percentiles of the logit-scale CV residuals
    lower: tuple[float, ...]  # every feature's calibration range
    upper: tuple[float, ...]
    provenance: dict[str, Any] = field(default_factory=dict)

    def eta(self, x: np.ndarray) -> np.ndarray:
        """The linear predictor of feature rows ``x`` (n, len(FEATURES)); it orders candidates."""
        z = (np.atleast_2d(x) - np.asarray(self.mean)) / np.asarray(self.scale)
        eta: np.ndarray = z @ np.asarray(self.coef) + self.intercept
        return eta

    def predict(self, x: np.ndarray, classes: int) -> Prediction:
        """Predicted accuracy in [1 / classes, 1] with its 80 % interval."""
        chance = 1.0 / classes
        eta = self.eta(x)
        return Prediction(
            modelled_accuracy(eta, chance),
            modelled_accuracy(eta + self.residuals[0], chance),
            modelled_accuracy(eta + self.residuals[1], chance),
            eta,
            chance,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "features": list(FEATURES),
            "mean": list(self.mean),
            "scale": list(self.scale),
            "coef": list(self.coef),
            "intercept": self.intercept,
            "alpha": list(self.alpha),
            "residuals": list(self.residuals),
            "lower": list(self.lower),
            "upper": list(self.upper),
            "provenance": self.provenance,
        }

    def to_record(self) -> MatcherRecord:
        """The matcher as a calibration result records it (its provenance a calibration's:
        DataError naming a field it lacks)."""
        provenance: ProvenanceRecord = exact(
            self.provenance, ProvenanceRecord, "the matcher's provenance"
        )
        return MatcherRecord(
            format_version=FORMAT_VERSION,
            features=FEATURES,
            mean=self.mean,
            scale=self.scale,
            coef=self.coef,
            intercept=self.intercept,
            alpha=self.alpha,
            residuals=self.residuals,
            lower=self.lower,
            upper=self.upper,
            provenance=provenance,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "matcher") -> Matcher:
        if not isinstance(d, dict) or d.get("format_version") != FORMAT_VERSION:
            raise DataError(f"{where}: not a matcher of format_version {FORMAT_VERSION}")
        if tuple(d.get("features", ())) != FEATURES:
            raise DataError(
                f"{where}: its features differ from this aihpc's ({', '.join(FEATURES)})"
            )
        try:
            floats = {
                k: tuple(map(float, d[k]))
                for k in ("mean", "scale", "coef", "alpha", "residuals", "lower", "upper")
            }
            lengths = {k: len(v) for k, v in floats.items()}
            if lengths != {**{k: len(FEATURES) for k in lengths}, "alpha": 2, "residuals": 2}:
                raise ValueError(f"lengths {lengths}")
            return cls(
                floats["mean"],
                floats["scale"],
                floats["coef"],
                float(d["intercept"]),
                _pair(floats["alpha"]),
                _pair(floats["residuals"]),
                floats["lower"],
                floats["upper"],
                dict(d.get("provenance", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{where}: malformed matcher ({exc})") from None


def _pair(values: tuple[float, ...]) -> tuple[float, float]:
    """A pair read from a matcher file (Matcher.from_dict has checked its length)."""
    first, second = values
    return first, second


def load(path: Path | None = None) -> Matcher:
    """The matcher in ``path``, or the one shipped with the package."""
    from aihpc.base.fileio import read_json

    if path is not None:
        return Matcher.from_dict(read_json(Path(path), "matcher file"), str(path))
    text = resources.files("aihpc.recommend").joinpath("data", SHIPPED).read_text(encoding="utf-8")
    return Matcher.from_dict(json.loads(text), f"shipped {SHIPPED}")


def _newton(a: np.ndarray, y: np.ndarray, penalty: np.ndarray, iterations: int = 100) -> np.ndarray:
    """Weights maximising sum y log s + (1 - y) log(1 - s) - sum penalty w^2 / 2, s = sigmoid(a w),
    for fractions ``y`` in [0, 1] (Newton's method)."""
    w = np.zeros(a.shape[1])
    for _ in range(iterations):
        s = _sigmoid(a @ w)
        step = np.linalg.solve(
            a.T @ (a * (s * (1 - s))[:, None]) + np.diag(penalty) + 1e-9 * np.eye(len(w)),
            a.T @ (s - y) + penalty * w,
        )
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return w


def fraction(accuracy: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Accuracy as the fraction of the way from chance to 1, clipped to [0, 1]."""
    chance = 1.0 / np.asarray(classes, dtype=np.float64)
    return np.clip((np.asarray(accuracy) - chance) / (1 - chance), 0.0, 1.0)


def two_stage(
    z: np.ndarray, y: np.ndarray, tasks: np.ndarray, alpha: tuple[float, float]
) -> tuple[np.ndarray, float]:
    """Coefficients (over all of :data:`FEATURES`) and intercept of the two-stage fit.

    1. Within tasks: the logistic fit (:func:`_newton`) on the candidate
       columns, penalty ``alpha[0]``, plus one free (barely penalised)
       intercept per task, so the candidate weights learn only how
       candidates differ on one task.
    2. Between tasks: a ridge regression (penalty ``alpha[1]``) of those
       task intercepts on the task columns, which predicts a new task's level.
    """
    cand = np.array([f not in TASK_FEATURES for f in FEATURES])
    ids, index = np.unique(tasks, return_inverse=True)
    a = np.hstack([z[:, cand], np.eye(len(ids))[index]])
    w = _newton(a, y, np.array([alpha[0]] * int(cand.sum()) + [TASK_PENALTY] * len(ids)))
    levels = w[int(cand.sum()) :]
    zt = np.stack([z[index == k][0, ~cand] for k in range(len(ids))])
    zc = zt - zt.mean(0)
    v = np.linalg.solve(zc.T @ zc + alpha[1] * np.eye(zt.shape[1]), zc.T @ (levels - levels.mean()))
    coef = np.zeros(len(FEATURES))
    coef[cand], coef[~cand] = w[: int(cand.sum())], v
    return coef, float(levels.mean() - zt.mean(0) @ v)


def _cross_validate(
    z: np.ndarray, y: np.ndarray, groups: np.ndarray, tasks: np.ndarray, alpha: tuple[float, float]
) -> np.ndarray:
    """Every row's logit-scale prediction from a fit without its group."""
    out = np.empty(len(y))
    for g in np.unique(groups):
        held = groups == g
        coef, icpt = two_stage(z[~held], y[~held], tasks[~held], alpha)
        out[held] = z[held] @ coef + icpt
    return out


def _within_task_tau(eta: np.ndarray, y: np.ndarray, tasks: np.ndarray) -> float:
    """Mean over tasks of Kendall's tau-b between ``eta`` and the truth ``y``."""
    return float(np.mean([kendall_tau(eta[tasks == k], y[tasks == k]) for k in np.unique(tasks)]))


def fit(
    x: np.ndarray,
    accuracy: np.ndarray,
    classes: np.ndarray,
    groups: np.ndarray,
    tasks: np.ndarray,
    provenance: dict[str, Any],
) -> Matcher:
    """Fit on rows ``x`` with accuracies and class counts; ``tasks`` (ids) for the within-task
    stage, ``groups`` (families) for cross-validation and the interval's residuals.

    Both penalties are chosen from :data:`ALPHAS` by leave-one-family-out
    cross-validation: the within-task one for the mean Kendall tau of the
    held-out tasks, then the between-task one for the mean absolute error
    of the predicted accuracy.
    """
    mean, scale = x.mean(0), x.std(0)
    scale[scale < 1e-12] = 1.0
    z = (x - mean) / scale
    y = fraction(accuracy, classes)
    chance = 1.0 / np.asarray(classes, dtype=np.float64)
    taus = {
        a: _within_task_tau(_cross_validate(z, y, groups, tasks, (a, 1.0)), y, tasks)
        for a in ALPHAS
    }
    within = max(ALPHAS, key=lambda a: (taus[a], a))
    etas = {a: _cross_validate(z, y, groups, tasks, (within, a)) for a in ALPHAS}
    mae = {
        a: float(np.mean(np.abs(modelled_accuracy(e, chance) - accuracy))) for a, e in etas.items()
    }
    between = min(ALPHAS, key=lambda a: (mae[a], -a))
    bound = logit(np.array(1.0))
    residuals = logit(y) - np.clip(etas[between], -bound, bound)
    low, high = np.percentile(residuals, INTERVAL)
    coef, icpt = two_stage(z, y, tasks, (within, between))
    return Matcher(
        tuple(mean.tolist()),
        tuple(scale.tolist()),
        tuple(coef.tolist()),
        icpt,
        (within, between),
        (float(low), float(high)),
        tuple(x.min(0).tolist()),
        tuple(x.max(0).tolist()),
        {
            **provenance,
            "cv_tau_by_within_alpha": {str(a): v for a, v in taus.items()},
            "cv_mae_by_between_alpha": {str(a): v for a, v in mae.items()},
        },
    )
