"""The matcher: predicted accuracy from task complexity and candidate capability.

A ridge regression, fitted by ``aihpc recommend calibrate`` on briefly
trained candidates, maps one feature vector per (task, candidate) to the
validation accuracy reached in the fixed step budget:

* task: ``probe_error``, ``n3``, ``n1``, ``log10(1 + F1)``, ``log10(T2)``;
* candidate: ``log10`` of parameters and of training ops per sample, of
  synflow, snip and grad_norm; jacob_cov as sign(v) log10(1 + |v|); NASWOT
  (already a log determinant) divided by the minibatch size;
* every candidate feature times ``probe_error``, so how much capability
  matters may depend on how hard the task is.

Features are standardised with the calibration data's mean and standard
deviation; the ridge penalty is chosen from :data:`ALPHAS` by
leave-one-task-out cross-validation (the fit is closed form, so a seed and
the calibration data fix it exactly).  Predictions are clipped to [0, 1].

The fitted model is JSON (:meth:`Matcher.to_dict`), shipped as
``aihpc/recommend/data/matcher.json`` with the command that made it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from aihpc.errors import ConfigError
from aihpc.recommend.complexity import Complexity
from aihpc.recommend.scoring import PROXY_BATCH, CandidateScore

FORMAT_VERSION = 1
TASK_FEATURES = ("probe_error", "n3", "n1", "log_f1", "log_t2")
CANDIDATE_FEATURES = ("log_params", "log_ops", "log_synflow", "log_snip", "log_grad_norm",
                      "jacob_cov", "naswot")
FEATURES = TASK_FEATURES + CANDIDATE_FEATURES + tuple(f"{c}*probe_error" for c in CANDIDATE_FEATURES)
ALPHAS = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
SHIPPED = "matcher.json"


def _log(v: float) -> float:
    return math.log10(v) if math.isfinite(v) and v > 0 else -30.0


def features(task: Complexity, cand: CandidateScore) -> np.ndarray:
    """The feature vector of one (task, candidate) pair, in the order of :data:`FEATURES`."""
    p = cand.proxies
    jc = p["jacob_cov"] if math.isfinite(p["jacob_cov"]) else 0.0
    nw = p["naswot"] / PROXY_BATCH if math.isfinite(p["naswot"]) else 0.0
    t = [task.probe_error, task.n3, task.n1, math.log10(1 + task.f1), math.log10(task.t2)]
    c = [_log(cand.params), _log(cand.ops_per_sample), _log(p["synflow"]), _log(p["snip"]),
         _log(p["grad_norm"]), math.copysign(math.log10(1 + abs(jc)), jc), nw]
    return np.asarray(t + c + [v * task.probe_error for v in c], dtype=np.float64)


@dataclass(frozen=True)
class Matcher:
    """A fitted ridge model; ``provenance`` records how it was made."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    alpha: float
    provenance: dict = field(default_factory=dict)

    def raw(self, x: np.ndarray) -> np.ndarray:
        """The regression's value for feature rows ``x`` (n, len(FEATURES)), not clipped: it ranks."""
        z = (np.atleast_2d(x) - np.asarray(self.mean)) / np.asarray(self.scale)
        return z @ np.asarray(self.coef) + self.intercept

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted accuracy: :meth:`raw` clipped to [0, 1]."""
        return np.clip(self.raw(x), 0.0, 1.0)

    def to_dict(self) -> dict:
        return {"format_version": FORMAT_VERSION, "features": list(FEATURES), "mean": list(self.mean),
                "scale": list(self.scale), "coef": list(self.coef), "intercept": self.intercept,
                "alpha": self.alpha, "provenance": self.provenance}

    @classmethod
    def from_dict(cls, d: dict, where: str = "matcher") -> Matcher:
        if not isinstance(d, dict) or d.get("format_version") != FORMAT_VERSION:
            raise ConfigError(f"{where}: not a matcher of format_version {FORMAT_VERSION}")
        if tuple(d.get("features", ())) != FEATURES:
            raise ConfigError(f"{where}: its features differ from this aihpc's ({', '.join(FEATURES)})")
        try:
            return cls(tuple(map(float, d["mean"])), tuple(map(float, d["scale"])),
                       tuple(map(float, d["coef"])), float(d["intercept"]), float(d["alpha"]),
                       dict(d.get("provenance", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: malformed matcher ({exc})") from None


def load(path: Path | None = None) -> Matcher:
    """The matcher in ``path``, or the one shipped with the package."""
    from aihpc.fileio import read_json

    if path is not None:
        return Matcher.from_dict(read_json(Path(path), "matcher file"), str(path))
    text = resources.files("aihpc.recommend").joinpath("data", SHIPPED).read_text(encoding="utf-8")
    return Matcher.from_dict(json.loads(text), f"shipped {SHIPPED}")


def _ridge(z: np.ndarray, t: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """Closed-form ridge on standardised ``z``: (coef, intercept); the intercept is not penalised."""
    tm = float(t.mean())
    coef = np.linalg.solve(z.T @ z + alpha * np.eye(z.shape[1]), z.T @ (t - tm))
    return coef, tm


def fit(x: np.ndarray, t: np.ndarray, groups: np.ndarray, provenance: dict) -> tuple[Matcher, dict]:
    """Fit on rows ``x`` with accuracies ``t``; ``groups`` (task ids) for leave-one-task-out CV.

    Returns the matcher and the CV error (mean absolute error) of every alpha tried.
    """
    mean, scale = x.mean(0), x.std(0)
    scale[scale < 1e-12] = 1.0
    z = (x - mean) / scale
    cv = {}
    for alpha in ALPHAS:
        errors = []
        for g in np.unique(groups):
            tr = groups != g
            coef, icpt = _ridge(z[tr], t[tr], alpha)
            errors.append(np.abs(np.clip(z[~tr] @ coef + icpt, 0, 1) - t[~tr]))
        cv[alpha] = float(np.concatenate(errors).mean())
    alpha = min(ALPHAS, key=lambda a: (cv[a], a))
    coef, icpt = _ridge(z, t, alpha)
    matcher = Matcher(tuple(mean.tolist()), tuple(scale.tolist()), tuple(coef.tolist()), icpt, alpha,
                      {**provenance, "cv_mae_by_alpha": {str(a): v for a, v in cv.items()}})
    return matcher, cv
